"""The cells whose numbers need care, one warning each (the report's list under the decision
view): noisy or outlier rounds, unpaired comparisons, saturated open loops, server counters that
counted other traffic, guessed token counts, a prefix cache not flushed, disturbed cells (and
whether their verdict was kept under load), client-bound TTFT and why, unsettled warm-ups, cells
that often proposed no draft. Pure."""

from __future__ import annotations

from typing import Any

from ..stats.paired import CV_WARN
from .screen_text import counted


def warnings(doc: dict[str, Any]) -> list[str]:
    """Cells whose numbers need care: rounds that vary more than CV_WARN, comparisons whose
    requests differ (unpaired), open-loop cells whose client queue grew (saturated), and for
    server backends: acceptance from server counters that also counted other traffic, token
    counts guessed from text chunks, a prefix cache that could not be flushed, a client that read
    TTFT late (client-bound, with why), a TTFT gap said as lying before the server's clock, and
    TTFT legs that could not judge."""
    out = []
    noisy = [
        f"{b['param']} {b['extra_info']['rounds_cv']:.0%}"
        for b in doc.get("benchmarks", [])
        if (b["extra_info"].get("rounds_cv") or 0) > CV_WARN
    ]
    if noisy:
        out.append(
            f"warning: {counted(len(noisy), 'cell')} {'varies' if len(noisy) == 1 else 'vary'} more than "
            f"{CV_WARN:.0%} across their rounds (coefficient of variation; more rounds or waves narrow "
            f"their intervals): {', '.join(noisy)}"
        )
    for b in doc.get("benchmarks", []):
        e = b["extra_info"]
        if e.get("speedup_pairing") == "unpaired":
            out.append(f"warning: {b['param']}: {e.get('speedup_verdict')}; no speedup reported")
        if e.get("saturated"):
            out.append(
                f"warning: {b['param']}: open loop saturated ({e.get('queued_requests')} requests "
                f"waited for a free slot; completed {e.get('achieved_request_rate') or 0:.2f} of "
                f"{e.get('offered_request_rate') or 0:.2f} req/s its arrivals offered)"
            )
        if e.get("accept_scope") == "server" and e.get("server_exclusive") is False:
            out.append(
                f"warning: {b['param']}: accept length from the server's /metrics counters, which "
                "counted more requests than the cell sent (other traffic on the server)"
            )
        if e.get("token_counts_approximate"):
            out.append(
                f"warning: {b['param']}: {e['token_counts_approximate']} requests' per-chunk token "
                "counts guessed from text chunks (the server sent neither usage nor token ids per "
                "chunk): ITL and TTFT-per-token figures are approximate"
            )
        if e.get("prefix_cache"):
            out.append(f"warning: {b['param']}: {e['prefix_cache']}")
        for o in e.get("outlier_rounds") or ():
            out.append(
                f"warning: {b['param']}: timed round {o['round'] + 1} at {o['tokens_per_s']:.1f} tok/s, "
                f"far off the median {o['median_tokens_per_s']:.1f} of its rounds (an outlier, kept in the "
                "numbers)"
            )
        if e.get("disturbed"):
            kept = e.get("speedup_under_load")
            then = (
                f"verdict kept, its interleaved pairs bore the load alike: {kept}"
                if kept
                else "no faster/slower verdict"
            )
            out.append(f"warning: {b['param']}: disturbed: {e['disturbed']}; {then}")
        if e.get("client_bound"):
            out.append(f"warning: {b['param']}: client-bound TTFT: {e['client_bound']}")
        elif e.get("ttft_before_server_clock"):
            out.append(f"note: {b['param']}: {e['ttft_before_server_clock']}")
        if e.get("ttft_legs_unused"):
            out.append(f"note: {b['param']}: TTFT's legs judge nothing: {e['ttft_legs_unused']}")
        if e.get("warmup_settled") is False:
            w = "/".join(f"{x:.0f}" for x in e.get("warmup_tokens_per_s") or ())
            out.append(
                f"warning: {b['param']}: warm-up did not settle ({w} tok/s in its warm-up rounds; "
                "more warmup rounds, or a quieter machine)"
            )
        if str(e.get("rounds_stop") or "").startswith("max_rounds"):
            out.append(f"warning: {b['param']}: {e['rounds_stop']}")
    dry = [
        f"{b['param']} {b['extra_info']['no_draft_fraction']:.0%}"
        for b in doc.get("benchmarks", [])
        if (b["extra_info"].get("no_draft_fraction") or 0) >= NO_DRAFT_WARN
    ]
    if dry:
        out.append(
            f"warning: {len(dry)} speculative cells proposed no draft in {NO_DRAFT_WARN:.0%} or more of "
            "their verify steps (an n-gram without a match, or a request's last step with one token left "
            f"to make; acceptance by position counts only the steps that proposed): {', '.join(dry)}"
        )
    return out


NO_DRAFT_WARN = 0.10  # a speculative cell with no draft in this share of its verify steps is named
