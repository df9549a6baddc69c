"""A tiny SGLang plugin: registers the speculative algorithm PLD (prompt-lookup decoding).

SGLang discovers general plugins through the ``sglang.srt.plugins`` entry-point group and calls
each one in every process it starts (engine, scheduler). This one registers ``PLD`` with
``SpeculativeAlgorithm.register``; its worker is SGLang's own n-gram worker (drafts looked up in
the request's own tokens), so ``speculative_algorithm: PLD`` behaves like NGRAM under a name that
neither SGLang's builtins nor pytest-specbench know. It shows that a fork's or a plugin's algorithm
is benchmarked as given: the matrix names it, the engine resolves it.

Install next to SGLang (no build step): ``python3 scripts/sglang_plugin/install.py SITE_DIR``.
"""


def register() -> None:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    builtin = SpeculativeAlgorithm.NGRAM

    class PromptLookup(CustomSpecAlgo):
        """Duck-types the builtin NGRAM member: the scheduler dispatches on these predicates."""

        def is_ngram(self) -> bool:
            return True

        def has_draft_kv(self) -> bool:
            return False

        def handle_server_args(self, server_args) -> None:
            builtin.handle_server_args(server_args)

        def __getattr__(self, name):  # anything else the scheduler asks of an algorithm
            return getattr(builtin, name)

    @SpeculativeAlgorithm.register("PLD", supports_overlap=True, spec_class=PromptLookup)
    def _worker(server_args):
        from sglang.srt.speculative.ngram_worker import NGRAMWorker

        return NGRAMWorker
