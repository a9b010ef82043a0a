"""Benchmark images on this machine: which are present (`coverage`) and bulk fetching (`fetch`)."""
