"""Which modules are mutated, and the tests that guard each.

Every ``.py`` file under ``spec/``, ``hisparse/`` and ``executor/`` is either a target
(``TARGETS``: its guard tests run first) or left out with a reason (``EXCLUDED``);
``tests/test_mutation_targets.py`` fails when a new module is in neither, so none is
forgotten. A mutant that survives its guards then runs the whole non-TLC suite
(``FULL_SUITE``) before it is called a survivor.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE_DIRS = ("spec", "hisparse", "executor")


@dataclass(frozen=True)
class Guard:
    """The tests run first on a mutant of one module; ``tlc``: they need TLC (its only
    guards are model-checking tests), so the guard run does not deselect ``tlc``."""

    tests: tuple[str, ...]
    tlc: bool = False


def _t(*names: str, tlc: bool = False) -> Guard:
    return Guard(tuple(f"tests/{n}.py" for n in names), tlc)


_SPEC = ("test_invariants_alone", "test_boundaries_machine", "test_protocol_bugs",
         "test_protocol_sync", "test_rule_recorded_ids_keep_their_kind", "test_protocol_stateful")
_SYSTEM = ("test_boundaries_system", "test_coordinator_lifecycle", "test_connector",
           "test_config", "test_messages", "test_boundaries_pool", "test_coordinator_tp")
_EXECUTOR = ("test_boundaries_executor", "test_executor_reference")
_TRACE = ("test_trace_format", "test_trace_record", "test_trace_admission")
_WORKERPROC = ("test_workerproc", "test_sharedpool")
_CLI = ("test_cli", "test_bench_cli", "test_simulate", "test_report", "test_metrics")
_TLC_TRACE = ("test_trace_check", "test_protocol_traces", "test_trace_admission")

TARGETS: dict[str, Guard] = {
    # the protocol machine, its state, invariants and the catalogue of rules
    "spec/machine.py": _t(*_SPEC),
    "spec/state.py": _t(*_SPEC),
    "spec/invariants.py": _t(*_SPEC),
    "spec/lifecycle.py": _t(*_SPEC, "test_coordinator_lifecycle"),
    "spec/constants.py": _t(*_SPEC, "test_config"),
    "spec/errors.py": _t(*_SPEC),
    "spec/variants.py": _t("test_protocol_bugs", "test_protocol_sync", "test_invariants_alone"),
    # (the drivers' move list is read by the stateful tests; the ranked variables by the
    # trace recorder: both killed guard survivors of the catalogue outside these guards)
    "spec/catalogue.py": _t("test_protocol_sync", "test_rule_sync_reports", "test_protocol_bugs",
                            "test_invariants_alone", "test_protocol_stateful",
                            "test_trace_record"),
    "spec/native.py": _t("test_native"),
    "spec/messages.py": _t("test_messages", "test_boundaries_system", *_WORKERPROC),
    # the trace format, its recorder and reader
    "spec/trace.py": _t(*_TRACE, "test_rule_trace_header", "test_rule_trace_limits_exact",
                        "test_rule_recorded_traces_read_back"),
    "spec/tracetypes.py": _t(*_TRACE),
    "spec/record.py": _t(*_TRACE),
    "spec/observe.py": _t("test_trace_record", "test_protocol_sync"),
    # the system: pools, configuration, coordinator, connector, worker
    "hisparse/blockpool.py": _t(*_SYSTEM),
    "hisparse/config.py": _t(*_SYSTEM),
    "hisparse/coordinator.py": _t(*_SYSTEM),
    "hisparse/connector.py": _t(*_SYSTEM),
    "hisparse/worker.py": _t(*_SYSTEM),
    "hisparse/bugs.py": _t("test_protocol_bugs", "test_invariants_alone", "test_protocol_sync"),
    # the shared pool and the worker process harness
    "hisparse/sharedpool.py": _t("test_sharedpool", "test_simulate",
                                 "test_rule_sharedpool_lifetime", "test_rule_sharedpool_waits"),
    "hisparse/workerport.py": _t(*_WORKERPROC),
    "hisparse/workerproc.py": _t(*_WORKERPROC),
    "hisparse/workerwire.py": _t(*_WORKERPROC),
    # the CLI, its argument checks, workloads, simulation, report and metrics
    "hisparse/cli.py": _t("test_rule_cli_check_reports", *_CLI),
    "hisparse/cliargs.py": _t("test_rule_cliargs_bounds", *_CLI, "test_sizing"),
    "hisparse/simulate.py": _t("test_simulate", "test_workerproc", "test_report", "test_metrics"),
    "hisparse/rows.py": _t("test_rule_rows_oracle", "test_simulate", "test_pdimport_runner",
                           "test_tp"),
    "hisparse/executors.py": _t("test_simulate", "test_workerproc", "test_accounting_executor"),
    "hisparse/workload.py": _t("test_workload", "test_simulate"),
    "hisparse/report.py": _t("test_report", "test_rule_report_load"),
    "hisparse/metrics.py": _t("test_metrics", "test_rule_metrics_exact"),
    "hisparse/docs.py": _t("test_trace_format"),
    # the TP merge
    "hisparse/tp/group.py": _t("test_tp", "test_rule_tp_group"),
    "hisparse/tp/launch.py": _t("test_tp", "test_rule_tp_launch"),
    "hisparse/tp/run.py": _t("test_tp", "test_coordinator_tp", "test_rule_tp_run",
                                "test_rule_tp_policy", "test_rule_tp_rank_cuda_paths"),
    # trace admission and the trace encoding for TLC (their guards model-check)
    "hisparse/tracecheck/admit.py": _t("test_trace_admission", tlc=True),
    "hisparse/tracecheck/check.py": _t("test_trace_windows", *_TLC_TRACE, tlc=True),
    "hisparse/tracecheck/encode.py": _t(*_TLC_TRACE, tlc=True),
    "hisparse/tracecheck/errtrace.py": _t(*_TLC_TRACE, tlc=True),
    "hisparse/tracecheck/module.py": _t(*_TLC_TRACE, tlc=True),
    "hisparse/tracecheck/ints.py": _t(*_TLC_TRACE, "test_trace_windows", tlc=True),
    "hisparse/tracecheck/window.py": _t("test_trace_windows", *_TLC_TRACE, tlc=True),
    "hisparse/tracecheck/delta.py": _t("test_trace_delta", *_TLC_TRACE, tlc=True),
    # the TLC runner and the conformance replay
    "hisparse/tlc/acquire.py": _t("test_tlc_check", tlc=True),
    "hisparse/tlc/cfg.py": _t("test_tlc_check"),
    "hisparse/tlc/check.py": _t("test_tlc_check", tlc=True),
    "hisparse/tlc/counterexample.py": _t("test_tlc_check", "test_protocol_traces", tlc=True),
    "hisparse/tlc/errors.py": _t("test_tlc_check"),
    "hisparse/tlc/output.py": _t("test_tlc_check"),
    "hisparse/tlc/paths.py": _t("test_tlc_check", tlc=True),
    "hisparse/tlc/runner.py": _t("test_tlc_check", tlc=True),
    "hisparse/tlc/value.py": _t("test_conformance"),
    "hisparse/conformance.py": _t("test_conformance", tlc=True),
    # CPU benchmarks and the engine's plain-Python parts
    "hisparse/bench/churn.py": _t("test_coordinator_lifecycle", "test_bench_cli"),
    "hisparse/bench/cli.py": _t("test_bench_cli", "test_engine"),
    "hisparse/bench/coordinator.py": _t("test_bench_cli"),
    "hisparse/bench/protocol.py": _t("test_bench_cli"),
    "hisparse/engine/config.py": _t("test_engine", "test_engine_v32"),
    "hisparse/engine/geometry.py": _t("test_engine_v32"),
    "hisparse/engine/tiling.py": _t("test_engine_attention"),
    "hisparse/bench/allocsearch.py": _t("test_allocsearch"),
    "hisparse/engine/workload.py": _t("test_engine", "test_workload"),
    "hisparse/engine/schedule.py": _t("test_engine"),
    "hisparse/engine/offload.py": _t("test_engine", "test_rule_indexer_offload_forgets"),
    # the executors' interface and the NumPy reference
    "executor/base.py": _t(*_EXECUTOR),
    "executor/errors.py": _t(*_EXECUTOR),
    "executor/layout.py": _t(*_EXECUTOR),
    "executor/reference.py": _t(*_EXECUTOR),
    "executor/resolver.py": _t(*_EXECUTOR),
    "executor/stream.py": _t(*_EXECUTOR, "test_boundaries_system"),
    "executor/validate.py": _t(*_EXECUTOR),
    "executor/accounting.py": _t("test_accounting_executor", "test_sizing"),
    # message integrity: sequence numbers, faulty channels, shapes of unvalidated messages
    "hisparse/channel.py": _t("test_rule_channel_numbers", "test_channels",
                              "test_system_stateful", *_SYSTEM),
    "hisparse/msgfaults.py": _t("test_simulate", "test_channels"),
    "hisparse/msgshape.py": _t("test_boundaries_system", "test_channels", "test_import_messages",
                               "test_rule_msgshape_imports"),
    "hisparse/jsonlines.py": _t("test_workload", "test_trace_limits"),
    "hisparse/tlc/launch.py": _t("test_interrupt", "test_tlc_check", tlc=True),
    "hisparse/tlc/signals.py": _t("test_interrupt", "test_cli", tlc=True),
    # sizing: model geometry, plan, the replay beside HiSparse disabled
    "hisparse/models.py": _t("test_sizing", "test_config"),
    "hisparse/sizing/baseline.py": _t("test_sizing"),
    "hisparse/sizing/cli.py": _t("test_sizing", "test_cli"),
    "hisparse/sizing/plan.py": _t("test_sizing"),
    "hisparse/sizing/replay.py": _t("test_sizing", "test_accounting_executor"),
    "hisparse/sizing/table.py": _t("test_sizing"),
    "hisparse/sizing/toy.py": _t("test_sizing", "test_cli"),
    # the P/D import transport (loopback and NIXL between processes)
    "hisparse/transport/base.py": _t("test_transport", "test_rule_transport_refusals"),
    "hisparse/transport/errors.py": _t("test_rule_transport_errors", "test_transport"),
    # (a rule test first where test_transport is slow: -x stops at the first failure)
    "hisparse/transport/geometry.py": _t("test_rule_import_geometry", "test_transport"),
    "hisparse/transport/loopback.py": _t("test_rule_loopback_edges", "test_transport"),
    "hisparse/transport/nixl.py": _t("test_rule_nixl_edges", "test_transport"),
    "hisparse/transport/nixlpeer.py": _t("test_rule_nixl_edges", "test_transport"),
    "hisparse/transport/staging.py": _t("test_transport", "test_rule_staging_edges"),
    "hisparse/bench/nixl.py": _t("test_bench_cli", "test_transport"),
    "hisparse/transport/arena.py": _t("test_rule_arena_edges", "test_transport",
                                      "test_pdimport_runner"),
    # the worker's P/D import runner, its executor calls and the simulate side
    "hisparse/pdimport/runner.py": _t("test_pdimport_runner", "test_pdimport_system",
                                      "test_rule_pdimport_runner_edges"),
    "hisparse/pdimport/prefill.py": _t("test_rule_prefill_pages", "test_pdimport_runner",
                                       "test_pdimport_system"),
    "hisparse/pdimport/sim.py": _t("test_rule_pd_side", "test_pdimport_system", "test_simulate"),
    "executor/importing.py": _t("test_pdimport_runner", "test_executor_reference"),
    # the suffix rule, the generic OffloadingConnector, MultiConnector, indexer offload
    "spec/suffix.py": _t("test_suffix_rule", "test_indexer_sim"),
    "spec/suffix_variants.py": _t("test_suffix_rule", "test_tlc_check"),
    "hisparse/connectors/base.py": _t("test_multi_connector", "test_offloading",
                                      "test_rule_connector_edges"),
    "hisparse/connectors/config.py": _t("test_multi_connector", "test_rule_connector_config"),
    "hisparse/connectors/gpu_group.py": _t("test_offloading", "test_indexer_sim",
                                           "test_rule_connector_edges",
                                           "test_rule_gpu_group_model"),
    "hisparse/connectors/hisparse_child.py": _t("test_multi_connector", "test_indexer_sim",
                                              "test_rule_hisparse_child"),
    "hisparse/connectors/indexer_rows.py": _t("test_offloading", "test_indexer_sim",
                                              "test_rule_connector_edges"),
    "hisparse/connectors/metrics.py": _t("test_multi_connector", "test_metrics"),
    "hisparse/connectors/multi.py": _t("test_multi_connector", "test_multi_connector_order",
                                       "test_indexer_sim", "test_rule_offload_store_pins"),
    "hisparse/connectors/offload_store.py": _t("test_offloading", "test_rule_offload_store_pins"),
    "hisparse/connectors/offloading.py": _t("test_offloading", "test_multi_connector",
                                            "test_rule_offloading_edges"),
    "hisparse/connectors/wire.py": _t("test_offloading", "test_multi_connector",
                                      "test_rule_connector_edges"),
    "hisparse/indexer_sim.py": _t("test_indexer_sim", "test_simulate"),
}

_REEXPORTS = "re-exports only: no logic to mutate"
_GPU = "GPU-only: needs CuPy and an NVIDIA GPU; its tests are marked gpu"
_TORCH = "needs torch and a GPU (the engine's model, caches and decode loop)"

EXCLUDED: dict[str, str] = {
    "spec/__init__.py": _REEXPORTS,
    "executor/__init__.py": _REEXPORTS,
    "hisparse/__init__.py": _REEXPORTS + " (the version string)",
    "hisparse/__main__.py": "calls hisparse.cli.main, nothing else",
    "hisparse/bench/__init__.py": _REEXPORTS,
    "hisparse/pdimport/__init__.py": _REEXPORTS,
    "hisparse/engine/__init__.py": _REEXPORTS,
    "hisparse/tlc/__init__.py": _REEXPORTS,
    "hisparse/tp/__init__.py": _REEXPORTS,
    "hisparse/tracecheck/__init__.py": _REEXPORTS,
    "hisparse/sizing/__init__.py": _REEXPORTS,
    "hisparse/transport/__init__.py": _REEXPORTS,
    "hisparse/connectors/__init__.py": _REEXPORTS,
    "executor/cuda/__init__.py": _GPU,
    "executor/cuda/backend.py": _GPU,
    "executor/cuda/executor.py": _GPU,
    "executor/cuda/hostmem.py": _GPU,
    "executor/cuda/ipc.py": _GPU,
    "executor/cuda/kernels.py": _GPU,
    "executor/cuda/pools.py": _GPU,
    "executor/cuda/results.py": _GPU,
    "executor/cuda/staging.py": _GPU + " (the P/D staging pool in VRAM)",
    "executor/cuda/tp.py": _GPU,
    "hisparse/bench/gpu.py": _GPU + " (benchmark timing)",
    "hisparse/bench/resolver.py": _GPU + " (benchmark timing)",
    "hisparse/bench/spill.py": _GPU + " (benchmark timing)",
    "hisparse/bench/kernels.py": _GPU + " (benchmark timing)",
    "hisparse/bench/pdstaging.py": _GPU + " (benchmark timing)",
    "hisparse/bench/tp.py": _GPU + " (benchmark timing)",
    "hisparse/bench/engine.py": _TORCH,
    "hisparse/bench/equalhbm.py": _TORCH + " (the equal-HBM bench; its arithmetic is "
    "tested in test_engine_v32)",
    "hisparse/engine/indexer.py": _TORCH,
    "hisparse/engine/indexer_scan.py": _TORCH + " (a Triton kernel)",
    "hisparse/engine/attention.py": _TORCH,
    "hisparse/engine/attention_kernel.py": _TORCH + " (a Triton kernel)",
    "hisparse/engine/backend.py": _TORCH,
    "hisparse/engine/cache.py": _TORCH,
    "hisparse/engine/engine.py": _TORCH,
    "hisparse/engine/inputs.py": _TORCH,
    "hisparse/engine/kvrow.py": _TORCH,
    "hisparse/engine/lockstep.py": _TORCH,
    "hisparse/engine/model.py": _TORCH,
    "hisparse/engine/offload_gpu.py": _TORCH + " (the indexer offload's torch worker)",
}

# The whole non-TLC suite a survivor of its guards must also pass. The compiled-build
# and wheel tests are left out: they are slow and test a build, not the mutated source;
# the mutation tool's own tests would nest a run in the run.
FULL_SUITE_IGNORES = (
    "tests/test_compiled_build.py",
    "tests/test_wheel.py",
    "tests/test_mutation_tool.py",
    "tests/test_mutation_targets.py",
)
