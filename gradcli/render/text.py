"""The text format: results for people, as rich `Line`s (tables, trees, styled lines).

One `_render_<Class>` method per kind of result (contract.Format); each hands over to the
module that knows that result. Colour is decided by the console that prints the lines.
"""

from __future__ import annotations

from typing import Any

from .contract import Format, Line


class TextFormat(Format):
    name = "text"

    def _render_CheckResult(self, result: Any) -> list[Line]:
        from .check import check_lines

        return check_lines(result)

    def _render_LibraryCheck(self, result: Any) -> list[Line]:
        from .check import library_check_lines

        return library_check_lines(result)

    def _render_FunctionResult(self, result: Any) -> list[Line]:
        from .function import function_lines

        return function_lines(result)

    def _render_DiscoveryResult(self, result: Any) -> list[Line]:
        from .discovery import discovery_lines

        return discovery_lines(result)

    def _render_TraceResult(self, result: Any) -> list[Line]:
        from .trace import DEFAULT_DEPTH, DEFAULT_MAX_NODES, trace_renderables

        return [Line(r) for r in trace_renderables(result, max_nodes=self.options.get("max_nodes", DEFAULT_MAX_NODES),
                                                   depth=self.options.get("depth", DEFAULT_DEPTH))]

    def _render_GradsResult(self, result: Any) -> list[Line]:
        from rich.text import Text

        from .grads import grads_renderables

        # Findings are not wrapped (soft_wrap): a finding stays one line to grep in a CI log.
        # Run from the command line: what the target turned out to be and the seed that repeats it.
        head = [Line(f"{result.target}: {result.found}; seed {result.seed}", soft_wrap=True)] if result.target else []
        return [*head, *(Line(r, soft_wrap=isinstance(r, Text)) for r in grads_renderables(result))]

    def _render_MemoryResult(self, result: Any) -> list[Line]:
        from .training.memory import DEFAULT_TOP, memory_lines

        head = [Line(f"{result.target}: {result.found}; seed {result.seed}", soft_wrap=True)] if result.target else []
        lines = memory_lines(result, self.options.get("depth"), self.options.get("top", DEFAULT_TOP))
        return head + [Line(line, soft_wrap=True) for line in lines]

    def _render_CompareResult(self, result: Any) -> list[Line]:
        from .training.compare import compare_lines

        return [Line(text, style=style or None, soft_wrap=True) for text, style in compare_lines(result)]

    def _render_DistributedResult(self, result: Any) -> list[Line]:
        from .training.distributed import distributed_text

        return [Line(line, soft_wrap=True) for line in distributed_text(result).rstrip("\n").split("\n")]

    def _render_DistributedGrads(self, result: Any) -> list[Line]:
        from .training.distributed import grads_rank_lines

        return self._render_GradsResult(result.health) + [Line(line, soft_wrap=True) for line in grads_rank_lines(result)]

    def _render_WatchResult(self, result: Any) -> list[Line]:
        from .training.watch import watch_lines

        return [Line(line, soft_wrap=True) for line in watch_lines(result)]

    def _render_DivergeResult(self, result: Any) -> list[Line]:
        from .training.diverge import diverge_lines

        return [Line(line, soft_wrap=True) for line in diverge_lines(result)]

    def _render_Listing(self, result: Any) -> list[Line]:
        from .listing import listing_lines

        return listing_lines(result)

    def _render_PlotData(self, result: Any) -> list[Line]:
        from .plot import plot_lines

        return plot_lines(result, width=self.width, terminal=self.options.get("terminal", False))

    # The demos' blocks, shown one by one as a demo runs (render/demo.py).
    def _render_Heading(self, block: Any) -> list[Line]:
        from .demo import block_lines

        return block_lines(block, width=self.width, color=self.color)

    _render_Prose = _render_Code = _render_Verdict = _render_GraphDrawing = _render_Shell = _render_Heading

    def _render_DemoRun(self, run: Any) -> list[Line]:
        """A finished demo: its blocks were shown as they ran; this is the closing summary."""
        from .demo import summary_lines

        return summary_lines(run.verdicts)
