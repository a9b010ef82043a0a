"""Model definitions that serving (retrievers/, rerank/) and training (training/) both use, so that
serving code never imports training code. torch is imported inside functions only."""
