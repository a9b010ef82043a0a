"""Tables handed to gradio as the dict its Dataframe takes (headers, data), built in the callback.

Gradio postprocesses a component update (`gr.update(value=frame, ...)`) on its one event-loop thread,
which every request of every visitor shares; a pandas frame costs it `to_dict(orient="split")` there
(~2-4 ms for the Report's paired table, the largest of a page load's). The dict is built here, in the
callback's worker thread, column by column, and gradio then only checks it (docs/benchmarks.md)."""

from __future__ import annotations

from typing import Any

import pandas as pd


def table_value(frame: pd.DataFrame) -> dict[str, list]:
    """What gradio's Dataframe shows of `frame`: its headers and its rows as lists of cells."""
    columns = [frame.iloc[:, i].tolist() for i in range(frame.shape[1])]
    return {"headers": list(frame.columns), "data": [list(row) for row in zip(*columns)]}


def frames_as_tables(values: dict[Any, Any]) -> dict[Any, Any]:
    """`values` (outputs by component) with the pandas frame of every Dataframe, bare or an update's value,
    as `table_value`; every other output as it is."""
    import gradio as gr

    out = {}
    for key, value in values.items():
        if not isinstance(key, gr.Dataframe):
            pass
        elif isinstance(value, pd.DataFrame):
            value = table_value(value)
        elif isinstance(value, dict) and isinstance(value.get("value"), pd.DataFrame):
            value = {**value, "value": table_value(value["value"])}
        out[key] = value
    return out
