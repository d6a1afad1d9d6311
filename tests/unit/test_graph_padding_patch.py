"""The graph-padding patch's own logic (plugin/graph_padding_patch.py), on a stand-in builder module; the real
GDNAttentionMetadataBuilder of every row goes through the same install in the discovery tier
(tests/discovery/test_layer_rig_vllm.py)."""

from __future__ import annotations

import dataclasses
import logging
import sys
import types

import pytest
import torch

from caovan.adapters.families import FAMILIES
from caovan.plugin import graph_padding_patch as patch
from caovan.plugin import uniform_decode_guard as guard

MODULE = "caovan_test_fake_gdn_attn"
FAMILY = dataclasses.replace(next(f for f in FAMILIES if f.refusal is None), metadata_module=MODULE)


def _qsl(*query_lens: int) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)


@pytest.mark.parametrize(
    ("query_lens", "drafts", "expected"),
    [
        ((3, 3, 0), (2, 2, -1), 2),  # two spec decodes padded to three requests: the bug's batch
        ((3, 0, 0, 0), (2, -1, -1, -1), 1),
        ((3, 3), (2, 2), None),  # a capture size: nothing to trim
        ((3, 5, 0), (2, -1, -1), 2),  # a spec decode and a prefill (eager: never padded, trimmed all the same)
        ((1, 1, 0), (-1, -1, -1), None),  # no spec decode: vLLM's plain-decode branch copes with padding
        ((0, 0), (-1, -1), None),  # nothing live
        ((3, 0, 3), (2, -1, 2), None),  # a zero-token request before a live one is not padding
        ((3, 0), (2, 0), None),  # a request with drafts is live whatever its length
    ],
)
def test_live_requests_are_those_before_the_trailing_padding(query_lens, drafts, expected):
    assert patch.live_requests(_qsl(*query_lens), torch.tensor(drafts, dtype=torch.int32)) == expected


def test_no_drafts_means_no_spec_decoding_and_nothing_to_trim():
    assert patch.live_requests(_qsl(3, 0), None) is None


@dataclasses.dataclass
class FakeCommon:
    """The fields the patch reads, and vLLM's own ``unpadded`` (it keeps the padded token count)."""

    query_start_loc_cpu: torch.Tensor
    num_actual_tokens: int
    num_reqs: int

    def unpadded(self, num_actual_tokens: int, num_actual_reqs: int) -> FakeCommon:
        return FakeCommon(self.query_start_loc_cpu[: num_actual_reqs + 1], num_actual_tokens, num_actual_reqs)


class FakeBuilder:
    """Counts prefills as vLLM 0.12 - 0.16 do: every non-spec request that is not a one-token decode."""

    calls: list[tuple] = []

    def build(self, common_prefix_len, common_attn_metadata, num_accepted_tokens=None,
              num_decode_draft_tokens_cpu=None, fast_build=False):  # fmt: skip
        FakeBuilder.calls.append((common_attn_metadata, num_accepted_tokens, num_decode_draft_tokens_cpu))
        non_spec_query_lens = torch.tensor([])
        num_decodes = 0
        num_prefills = non_spec_query_lens.size(0) - num_decodes
        return "metadata", num_prefills


class FixedBuilder:
    """Leaves zero-token requests out of the count, as vLLM 0.17 on."""

    def build(self, common_prefix_len, common_attn_metadata, num_accepted_tokens=None,
              num_decode_draft_tokens_cpu=None, fast_build=False):  # fmt: skip
        non_spec_query_lens_cpu = torch.tensor([])
        num_zero_len = (non_spec_query_lens_cpu == 0).sum().item()
        num_prefills = non_spec_query_lens_cpu.size(0) - num_zero_len
        return num_prefills


class MovedBuilder:
    """Counts prefills somewhere the probe does not read."""

    def build(self, common_prefix_len, common_attn_metadata, num_accepted_tokens=None,
              num_decode_draft_tokens_cpu=None, fast_build=False):  # fmt: skip
        return None


@pytest.fixture
def builder_module(monkeypatch):
    module = types.ModuleType(MODULE)
    module.GDNAttentionMetadataBuilder = FakeBuilder
    module.CommonAttentionMetadata = FakeCommon
    monkeypatch.setitem(sys.modules, MODULE, module)
    FakeBuilder.calls = []
    original = FakeBuilder.__dict__["build"]
    yield module
    FakeBuilder.build = original


def test_the_patch_hands_the_builder_the_live_requests_by_keyword_or_position(builder_module):
    original = FakeBuilder.__dict__["build"]
    assert patch.install(FAMILY) is True and FakeBuilder.__dict__["build"]._caovan_wrapped is original
    assert patch.install(FAMILY) is True and FakeBuilder.__dict__["build"]._caovan_wrapped is original  # once
    padded = FakeCommon(_qsl(3, 3, 0), num_actual_tokens=9, num_reqs=3)
    accepted = torch.tensor([1, 3, 1])
    drafts = torch.tensor([2, 2, -1])
    builder = FakeBuilder()
    assert builder.build(0, padded, accepted, drafts)[0] == "metadata"
    builder.build(common_prefix_len=0, common_attn_metadata=padded, num_accepted_tokens=accepted,
                  num_decode_draft_tokens_cpu=drafts)  # fmt: skip
    for common, got_accepted, got_drafts in FakeBuilder.calls:
        assert (common.num_reqs, common.num_actual_tokens) == (2, 9)  # the padded tokens stay: graph sizes
        assert common.query_start_loc_cpu.tolist() == [0, 3, 6]
        assert got_accepted.tolist() == [1, 3] and got_drafts.tolist() == [2, 2]
    # A batch of a capture size goes through as vLLM built it: the very objects.
    exact = FakeCommon(_qsl(3, 3), num_actual_tokens=6, num_reqs=2)
    builder.build(0, exact, accepted[:2], drafts[:2])
    assert FakeBuilder.calls[-1][0] is exact
    assert patch.uninstall(FAMILY) is True and FakeBuilder.__dict__["build"] is original
    assert patch.uninstall(FAMILY) is False


@pytest.mark.parametrize(("cls", "counts"), [(FakeBuilder, True), (FixedBuilder, False), (MovedBuilder, None)])
def test_the_probe_reads_how_build_counts_prefills(cls, counts):
    assert patch.counts_padding_as_prefill(cls) is counts


@pytest.mark.parametrize("cls", [FixedBuilder, MovedBuilder])
def test_only_a_builder_that_counts_padding_gets_the_patch(builder_module, cls):
    builder_module.GDNAttentionMetadataBuilder = cls
    assert patch.install(FAMILY) is False and not hasattr(cls.__dict__["build"], "_caovan_wrapped")
    assert patch.judgement(FAMILY) is None and patch.judgement(None) is None
    builder_module.GDNAttentionMetadataBuilder = FakeBuilder
    on, off, why = patch.judgement(FAMILY)
    assert (on, off) == (True, False) and patch.ISSUE in why and "live requests" in why


def test_a_builder_the_patch_does_not_fit_is_left_alone_and_said_so(builder_module, caplog):
    del builder_module.CommonAttentionMetadata  # no unpadded() to trim with
    with caplog.at_level(logging.WARNING):
        assert patch.install(FAMILY) is False
    assert not hasattr(FakeBuilder.__dict__["build"], "_caovan_wrapped")
    assert patch.judgement(FAMILY)[:2] == (False, False)
    assert [r.getMessage() for r in caplog.records if "does not fit" in r.getMessage()] != []


def test_full_graph_safety_adds_the_padding_judgement(builder_module, monkeypatch):
    monkeypatch.setattr(guard, "_uniform_decode_safety", lambda pp: guard.FullGraphSafety(True, False, "shape"))
    safety = guard.full_graph_safety(FAMILY, 1)
    assert (safety.with_caovan, safety.without_caovan) == (True, False)
    assert safety.reason.startswith("shape; ") and patch.ISSUE in safety.reason
    # vLLM fixed the shape test but not the padding: still not safe without caovan.
    monkeypatch.setattr(guard, "_uniform_decode_safety", lambda pp: guard.FullGraphSafety(True, True, "fixed"))
    safety = guard.full_graph_safety(FAMILY, 1)
    assert (safety.with_caovan, safety.without_caovan) == (True, False)
    builder_module.GDNAttentionMetadataBuilder = FixedBuilder
    assert guard.full_graph_safety(FAMILY, 1) == guard.FullGraphSafety(True, True, "fixed")


def test_uninstall_imports_nothing():
    family = dataclasses.replace(FAMILY, metadata_module="caovan_test_never_imported")
    assert patch.uninstall(family) is False
    assert "caovan_test_never_imported" not in sys.modules
