"""The figures of a run: per operator and per file, generated / run / killed / survived.

Read from the JSON that ``tools/mutate.py --json`` writes (after every mutant, so a run
cut short still has its figures). ``EQUIVALENT`` holds the survivors argued equivalent in
``docs/mutation-survivors.md``; a survivor is counted equivalent only if listed there.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from tools.mutation.runner import KILLED, SURVIVED, TIMEOUT

# mutant id -> the short reason; the argument is in docs/mutation-survivors.md
EQUIVALENT: dict[str, str] = {
    "spec/machine.py:1045:reorder:0": "dict.get moved before the 'none' return: pure",
    # the guard phase over the never-mutated files (docs/mutation-guard-run.json)
    "spec/catalogue.py:521:reorder:1": "pure assignment moved before an append-only if",
    "spec/catalogue.py:546:reorder:11": "pure assignment moved before an append-only if",
    "spec/catalogue.py:559:reorder:9": "pure assignment moved before an append-only if",
    "spec/catalogue.py:589:reorder:4": "pure assignment moved before an append-only if",
    "spec/catalogue.py:585:reorder:3": "source read moved before an append-only if",
    "spec/catalogue.py:379:none:1": "a Spill (NamedTuple of six) is always truthy",
    "spec/trace.py:454:none:1": "a TraceHeader (pydantic model) is always truthy",
    "spec/trace.py:306:none:6": "{} and False are both false where read",
    "hisparse/workload.py:134:reorder:1": "independent pure assignment moved before an if",
    "hisparse/metrics.py:181:none:0": "the HTTP server object is always truthy",
    # the second guard-phase run (docs/mutation-guard-run2.json)
    "hisparse/connectors/offload_store.py:163:reorder:4": "local append moved before an if",
    "hisparse/pdimport/runner.py:112:reorder:0": "attribute of an object whose __init__ raises",
    "hisparse/pdimport/runner.py:285:none:0": "an ImportFailed (exception) is always truthy",
    "hisparse/pdimport/runner.py:364:none:13": "an ImportFailed (exception) is always truthy",
    "hisparse/pdimport/runner.py:369:none:14": "an ImportFailed (exception) is always truthy",
    "hisparse/pdimport/runner.py:358:bool:3": "done iff every chunk copied, where read",
    "hisparse/transport/staging.py:60:reorder:0": "attribute of an object whose __init__ raises",
    "hisparse/transport/base.py:310:none:3": "an ImportFailed (exception) is always truthy",
    "hisparse/channel.py:38:none:0": "next is None or at least 1 (seqs are non-negative)",
    "hisparse/msgshape.py:172:none:9": "why is None or a non-empty message",
    "hisparse/rows.py:19:var:0": "key_ids and offsets have one size (else both raise)",
    "hisparse/rows.py:22:arith:8": "another tail pattern, still derived from every coordinate",
    "hisparse/rows.py:38:arith:10": "a symmetric offset subtracted: the same distribution",
    "hisparse/engine/offload.py:76:reorder:0": "attributes of an object whose __init__ raises",
    "hisparse/engine/offload.py:141:none:2": "worker meta bytes are None or non-empty",
    "hisparse/sharedpool.py:44:none:0": "differs only for the name '', whose attach raises",
    "hisparse/sharedpool.py:119:reorder:1": "the writer's spills checked twice: pure",
    # the third guard-phase run (docs/mutation-guard-run3.json)
    "hisparse/tp/group.py:75:none:0": "list([]) is [] too: the branches agree when empty",
    "hisparse/tp/run.py:151:none:9": "an Admission (NamedTuple of three) is always truthy",
    "hisparse/tp/run.py:168:none:13": "connector metadata (pydantic model) is always truthy",
    "hisparse/tp/run.py:292:cmp:26": "position 0 is page 0 on either branch",
    "hisparse/tp/run.py:292:int:5": "position 0 is page 0 on either branch",
    "hisparse/tp/run.py:294:cmp:42": "position 0 is offset 0 on either branch",
    "hisparse/tp/run.py:239:call:29": "a released request's pages are never read again",
    "hisparse/tp/run.py:472:var:1": "the probe's refusal never changes the reader: no raise",
    "hisparse/tp/run.py:531:none:1": "close is None or a bound method (truthy)",
    # its second round (docs/mutation-survivors.md, "Second round resolved: tp/run.py")
    "hisparse/tp/run.py:149:loop:1": "past the bound every later request is skipped too",
    "hisparse/tp/run.py:181:reorder:6": "steps_checked is read only after checks that returned",
    "hisparse/tp/run.py:252:reorder:7": "a pure list built before an early return: discarded",
    "hisparse/tp/run.py:261:none:2": "a plan's meta is None or non-empty JSON",
    "hisparse/tp/run.py:492:reorder:12": "the done plan admits none; its releases are not read",
    "hisparse/tp/run.py:529:reorder:4": "the barrier still precedes every close and unmap",
    "hisparse/tp/run.py:341:bool:6": "no CPU stream, both CUDA streams set: same branch",
    "hisparse/tp/run.py:409:cmp:5": "every rank has the file mapped; unlink is missing_ok",
    "hisparse/tp/run.py:534:none:8": "arena is None or a host arena object (always truthy)",
    "hisparse/tp/run.py:341:none:11": "a CuPy Stream has no __bool__/__len__: truthy (H200)",
    "hisparse/tp/run.py:523:reorder:16": "acks to the coordinator, reads to the writer: disjoint",
    # the sampled whole-suite run (docs/mutation-run6/)
    "spec/catalogue.py:622:reorder:2": "pure source parses moved before an append-only if",
    "spec/trace.py:496:reorder:2": "a pure set-building constructor moved before a raise",
    "hisparse/coordinator.py:248:reorder:1": "a pure read moved before a block that reads",
    "hisparse/workerproc.py:224:none:2": "None or an exception class (always truthy)",
    "hisparse/cli.py:204:none:0": "injected is None or a bug's name (never empty)",
    "hisparse/cli.py:226:none:1": "a Path is always truthy",
    "hisparse/cli.py:270:none:9": "jobs is None or a positive int",
    "hisparse/connector.py:81:reorder:0": "attribute of an object whose __init__ raises",
    "hisparse/simulate.py:799:reorder:9": "the notes read spills, misses, too_large: not imports",
    "hisparse/bench/churn.py:134:reorder:4": "a local append moved before a block not reading it",
    "executor/resolver.py:90:reorder:1": "a pure dict built before a continue: discarded",
    "hisparse/connectors/offloading.py:218:reorder:3": "attributes set in a raising __init__",
    "hisparse/indexer_sim.py:125:loop:0": "the test ignores r: every later one continues",
    "hisparse/engine/schedule.py:117:loop:2": "spill is None only with no room: so are later ones",
    "spec/variants.py:93:none:2": "a Spill (NamedTuple of six) is always truthy",
    "spec/observe.py:31:none:0": "a Spill (NamedTuple of six) is always truthy",
    "hisparse/config.py:123:none:1": "host_pool_blocks is None or at least 1 (ge=1)",
    "hisparse/worker.py:270:none:5": "an ImportRunner has no __bool__/__len__: truthy",
    "hisparse/workerport.py:143:cmp:2": "a row of 0 is replaced by 0: the same rows",
    "hisparse/engine/offload.py:74:none:0": "on_spill is None or a callable (truthy)",
    "hisparse/pdimport/sim.py:87:none:0": "problem() is None or a non-empty message",
    "spec/machine.py:204:none:2": "an owner is None or a page (a tuple of two): truthy",
    "spec/messages.py:242:none:0": "a cache miss on an empty set recomputes the same set",
    "spec/invariants.py:26:none:3": "a host key is None or a declared key (never empty)",
    "hisparse/tlc/output.py:73:none:0": "a re.Match is always truthy",
    "hisparse/bench/churn.py:105:none:0": "an Admission (NamedTuple of three) is truthy",
    "hisparse/bench/coordinator.py:32:var:5": "how many pages the bench times: no other figure",
    "hisparse/transport/nixlpeer.py:126:none:2": "a started process's pid is positive",
    "hisparse/indexer_sim.py:147:none:3": "allocate gives None or a block per page (>= 1)",
    "spec/trace.py:373:none:7": "None or a list; any() of an empty list is False",
    "hisparse/coordinator.py:238:none:1": "a declared request's keys are never empty",
    "hisparse/simulate.py:602:none:10": "a HiSparseMetrics has no __bool__/__len__: truthy",
    "hisparse/tp/run.py:296:none:4": "the timer is None or a function (truthy)",
    "executor/resolver.py:95:var:22": "a held position again: the same idempotent writes",
    "spec/suffix.py:53:var:6": "the fallback is reached only when host_hit > gpu_hit",
    "hisparse/sizing/plan.py:113:var:14": "g is geometry (g = geometry just above)",
    "hisparse/config.py:137:none:2": "gpu_kv_gib is None or above 0 (gt=0)",
    "hisparse/coordinator.py:736:bool:6": "rx and seq are set together or not at all",
    "hisparse/workerproc.py:131:call:5": "the pipe's close is an EOF: the child exits 0 anyway",
    "hisparse/tp/run.py:549:bool:1": "every host arena (private or shared) has a close",
    "hisparse/connector.py:137:none:4": "a HiSparseWorker has no __bool__/__len__: truthy",
    "hisparse/bench/nixl.py:49:var:8": "how many READs the median is of: no figure counts them",
    "hisparse/connectors/multi.py:132:reorder:1": "attribute set in a raising __init__",
    "spec/machine.py:755:int:10": "block 0 also goes through _host, which passes it",
    "hisparse/sizing/cli.py:100:none:12": "--max-running is None or a positive int",
    "hisparse/workerproc.py:175:call:11": "the copy goes when __init__ returns (a start-only wait)",
    "hisparse/workerproc.py:195:call:13": "the finalizer then meets a dead process, a closed pipe",
    "executor/accounting.py:199:var:14": "a stack of no misses adds no row to the plan",
    "executor/validate.py:136:int:11": "block 0 takes the field-by-field path: the same ints",
    "spec/catalogue.py:680:reorder:4": "a pure regex moved before an append-only if",
    "spec/invariants.py:435:reorder:3": "a pure set built for every request, read for aborted",
    "hisparse/coordinator.py:523:reorder:7": "a pure read moved before an early return",
    "hisparse/cli.py:447:reorder:2": "a pure constructor moved before a raise",
    "hisparse/bench/nixl.py:114:var:25": "how many staged imports the median is of",
    "spec/machine.py:956:reorder:20": "the write moves before writes that do not read it",
    "spec/trace.py:499:reorder:3": "a local list appended before a raise: discarded",
    "hisparse/tp/run.py:549:none:8": "a host arena has no __bool__/__len__: truthy",
    "hisparse/msgshape.py:164:reorder:4": "a pure getattr moved before a return",
    "hisparse/transport/base.py:287:none:7": "an import's error is None or an exception",
    "hisparse/pdimport/sim.py:113:cmp:5": "random() is exactly 0.5 with chance 2**-53",
    "spec/machine.py:169:none:18": "an Observer has no __bool__/__len__: truthy",
    "hisparse/indexer_sim.py:145:raise:5": "unreachable: the check above grants the blocks",
    "hisparse/simulate.py:646:none:11": "worker meta bytes are None or non-empty JSON",
    "hisparse/coordinator.py:363:raise:7": "unreachable: a fresh declaration always arrives",
    "hisparse/pdimport/sim.py:78:var:28": "no import arrived: no slot used, a mean of 0 either way",
    "hisparse/tp/run.py:181:none:12": "connector metadata (pydantic model) is always truthy",
    "hisparse/simulate.py:424:bool:5": "the accounting executor's writes are range checks alone",
    "hisparse/coordinator.py:706:reorder:15": "two appends to different local lists swapped",
    "spec/machine.py:1307:int:16": "rank 0 also goes through _rank, which passes it",
    "hisparse/coordinator.py:243:none:13": "a location is None or a (tier, block) pair",
    "hisparse/cli.py:540:none:16": "a HiSparseMetrics has no __bool__/__len__: truthy",
    "spec/messages.py:176:var:27": "since and epoch are None together (checked just above)",
    "hisparse/sizing/plan.py:132:var:32": "g is geometry (g = geometry just above)",
    # the inlined range tests of free, pin and unpin decide only whether _check runs, which
    # raises exactly outside 0..n-1 and does nothing for block 0 (the first runs' argument)
    "hisparse/blockpool.py:85:cmp:13": "block 0 also goes through _check, which passes it",
    "hisparse/blockpool.py:85:int:6": "block 0 also goes through _check, which passes it",
    "hisparse/blockpool.py:99:cmp:11": "block 0 also goes through _check, which passes it",
    "hisparse/blockpool.py:99:int:4": "block 0 also goes through _check, which passes it",
    "hisparse/blockpool.py:106:cmp:12": "block 0 also goes through _check, which passes it",
    "hisparse/blockpool.py:106:int:5": "block 0 also goes through _check, which passes it",
    "hisparse/connectors/indexer_rows.py:49:arith:4": "a sign flipped: still every coordinate",
    "hisparse/connectors/indexer_rows.py:49:arith:6": "a sign flipped: still every coordinate",
    "hisparse/connectors/indexer_rows.py:50:arith:9": "a sign flipped: still every coordinate",
    "hisparse/transport/loopback.py:35:reorder:0": "attribute of an object whose __init__ raises",
    "hisparse/pdimport/sim.py:89:reorder:0": "attribute of an object whose __init__ raises",
    "hisparse/connectors/metrics.py:19:none:0": "a CollectorRegistry is always truthy",
    # its second round: gpu_group, loopback, geometry, indexer_rows, wire
    "hisparse/transport/loopback.py:92:none:0": "a LoopbackPrefiller is always truthy",
    "hisparse/transport/loopback.py:112:reorder:2": "pure region lookup moved before a return",
    "hisparse/transport/loopback.py:124:reorder:4": "a pure reshape moved before a raise",
    "hisparse/transport/loopback.py:135:none:2": "a bound chunk's dests are never empty",
    "hisparse/connectors/indexer_rows.py:49:arith:3": "a sign flipped: still every coordinate",
    "hisparse/connectors/indexer_rows.py:50:arith:8": "a sign flipped: still every coordinate",
    # the files run for the first time (docs/mutation-run4c/)
    "hisparse/tp/launch.py:50:reorder:0": "get_context moved before an if it does not touch",
    "hisparse/tp/launch.py:73:loop:0": "error was just set: continue ends the loop too",
    "hisparse/tp/launch.py:69:none:1": "error is None or a non-empty message",
    "hisparse/tp/launch.py:87:none:2": "error is None or a non-empty message",
    "hisparse/tp/launch.py:91:none:0": "error is None or a non-empty message",
    # (the same four in tp/launch.py after its fix, docs/mutation-run4c/tplaunch2.json)
    "hisparse/tp/launch.py:78:loop:0": "error was just set: continue ends the loop too",
    "hisparse/tp/launch.py:74:none:1": "error is None or a non-empty message",
    "hisparse/tp/launch.py:93:none:2": "error is None or a non-empty message",
    "hisparse/tp/launch.py:97:none:0": "error is None or a non-empty message",
    "hisparse/connectors/config.py:27:reorder:1": "a Mapping's get moved before a check: pure",
    "hisparse/connectors/hisparse_child.py:57:none:0": "an Admission (NamedTuple) is truthy",
    "hisparse/connectors/hisparse_child.py:71:none:1": "connector metadata (pydantic) is truthy",
    "hisparse/transport/nixl.py:90:none:1": "a nixlRegDList is always truthy",
    "hisparse/transport/nixl.py:103:none:2": "a nixlRegDList is always truthy",
    "hisparse/transport/nixl.py:147:none:5": "a nixl_xfer_handle is always truthy",
    # (the second nixl.py run, docs/mutation-run4c/nixl2.json)
    "hisparse/transport/nixl.py:80:none:0": "a nixlRegDList is always truthy",
    "hisparse/transport/nixl.py:87:none:4": "a nixlRegDList is always truthy",
    "hisparse/transport/nixl.py:107:none:3": "a nixlRegDList is always truthy",
    "hisparse/transport/nixl.py:92:reorder:1": "memory_kind only reads the buffer: pure",
    "hisparse/transport/nixl.py:147:none:6": "a chunk's destinations are None or non-empty",
    # the sampled run over every logic module on the H200 host's CPUs (docs/mutation-run6/)
    "spec/machine.py:747:int:10": "block 0 also goes through _host, which passes it",
    "spec/machine.py:1324:int:17": "rank 0 also goes through _rank, which passes it",
    "spec/machine.py:1171:cmp:133": "rank 0 also goes through _rank, which passes it",
    "spec/machine.py:263:int:20": "_rank is reached only for a rank outside 0..ranks-1",
    "spec/machine.py:217:cmp:60": "the slow path redoes a phase change's indexes: the same",
    "spec/machine.py:238:call:42": "unreachable: StartSpill inlines a free block's spill",
    "spec/machine.py:207:call:108": "dead branch (a count plus one is never 0): removed",
    "spec/machine.py:489:none:60": "a Spill (NamedTuple of six) is always truthy",
    "spec/machine.py:1338:none:40": "a copy carries a key, never empty, or None",
    "spec/machine.py:1356:reorder:44": "a pure expression moved before a continue",
    "spec/machine.py:429:cmp:76": "a running request's page always has a location",
    "spec/machine.py:325:none:62": "only an injected bug's Arrive runs it; a page is truthy",
    "spec/machine.py:1328:reorder:33": "the refusal it moves before exists only in a bug",
    "spec/machine.py:1405:var:141": "only an injected bug executes a replay",
    "spec/machine.py:1408:reorder:45": "only an injected bug executes a replay",
    "hisparse/coordinator.py:752:var:16": "w is rank (w = rank just above)",
    "hisparse/coordinator.py:361:call:79": "unreachable: a fresh declaration always arrives",
    "hisparse/coordinator.py:362:call:80": "unreachable: a fresh declaration always arrives",
    "hisparse/simulate.py:793:call:79": "the bar is run()'s local: freed, so closed, on return",
    # the second, fresh sample (one in seven; docs/mutation-run6/s7.json)
    "hisparse/sizing/cli.py:92:reorder:0": "a pure path moved before a raise",
    "hisparse/msgfaults.py:33:reorder:0": "attribute of an object whose __post_init__ raises",
    "executor/accounting.py:171:reorder:1": "a pure index moved before a continue",
    "spec/suffix_variants.py:63:reorder:0": "a pure lookup moved before a return",
    "hisparse/indexer_sim.py:149:reorder:2": "moved before a raise can_allocate rules out",
    "hisparse/tp/run.py:292:reorder:9": "a pure dict built before an early return",
    "executor/accounting.py:203:reorder:3": "two independent counter updates swapped",
    "spec/catalogue.py:646:reorder:8": "a pure regex moved before an append-only if",
    "hisparse/tlc/value.py:42:none:1": "a re.Match is always truthy",
    "hisparse/bench/allocsearch.py:49:none:0": "hi, once found, is above lo >= 0",
    "hisparse/sizing/cli.py:219:none:2": "--json is None or a Path (always truthy)",
    "hisparse/tp/run.py:339:none:10": "worker meta (pydantic model) is always truthy",
    "hisparse/workerproc.py:202:none:1": "the only timeout passed is START_TIMEOUT_S > 0",
    "hisparse/indexer_sim.py:219:none:7": "a HiSparseMetrics has no __bool__/__len__: truthy",
    "hisparse/workerproc.py:115:none:4": "worker meta (pydantic model) is always truthy",
    "hisparse/sizing/cli.py:71:none:3": "--gpu-kv-gib is None or above 0 (positive_float)",
    "hisparse/sizing/plan.py:143:var:41": "g is geometry (g = geometry above)",
    "hisparse/coordinator.py:755:var:18": "w is rank (w = rank above)",
    "hisparse/coordinator.py:767:var:21": "w is rank (w = rank above)",
    "hisparse/indexer_sim.py:138:cmp:14": "reclaim(0) spills nothing (islice of 0)",
    "spec/trace.py:496:bool:12": "step_problem builds the same domain itself from None",
    # the second sample's resumed run (docs/mutation-run6/s7.json, outcomes 757 on)
    "spec/variants.py:192:none:3": "a Spill (NamedTuple of six) is always truthy",
    "spec/machine.py:255:int:20": "_rank is reached only for a rank outside 0..ranks-1",
    "spec/machine.py:324:int:27": "block 0 also goes through _gpu, which passes it",
    "spec/machine.py:1411:reorder:45": "only an injected bug executes a replay; no shared reads",
    "spec/machine.py:230:call:42": "its one caller's block is already in open_spills",
    "spec/machine.py:377:cmp:18": "the slow path writes the same for a block with no transfer",
    "spec/machine.py:812:none:33": "declared is a dict or None; an empty dict holds no r",
    "spec/machine.py:180:none:19": "a location is None or a (tier, block) pair: truthy",
    "executor/validate.py:136:cmp:38": "transfer ID 0 takes the field-by-field path: same ints",
    "executor/validate.py:136:cmp:40": "host block 0 takes the field-by-field path: same ints",
    "executor/validate.py:156:var:19": "tids and dsts have one entry per checked spill",
    "hisparse/coordinator.py:720:none:24": "a location is None or a (tier, block) pair: truthy",
    "spec/invariants.py:314:none:18": "a GPU owner is None or a (request, page) pair: truthy",
    "spec/invariants.py:366:none:24": "a Spill (NamedTuple of six) is always truthy",
    "spec/machine.py:619:none:10": "a GPU owner is None or a (request, page) pair: truthy",
    "spec/machine.py:131:none:16": "an empty set holds no request: r in it is False too",
    "spec/machine.py:250:cmp:64": "_host is reached only for a block outside the pool",
    "spec/machine.py:255:cmp:152": "_rank is reached only for a rank its caller refused",
    "spec/machine.py:324:cmp:205": "block 0 also goes through _gpu, which passes it",
    "spec/machine.py:525:cmp:23": "_refuse_repeats returns at once for one ID",
    "spec/machine.py:485:none:28": "a Spill (NamedTuple of six) is always truthy",
    "spec/machine.py:475:var:32": "first empty: full empty too, and the loop does nothing",
    "hisparse/simulate.py:348:none:33": "workload_path is None or a Path (always truthy)",
    "hisparse/simulate.py:661:cmp:61": "with one rank both branches call on_worker_lost(rank 0)",
    "hisparse/simulate.py:386:reorder:11":
        "disjoint states: they differ only after a fatal refusal",
    # the whole run (docs/mutation-run7/whole.json), its first 510 outcomes
    "executor/resolver.py:38:var:0": "hot_tag and hot_stamp are allocated with one shape",
    "hisparse/bench/allocsearch.py:37:reorder:0": "a fresh FitSearch moved before a raise",
    "hisparse/bench/cli.py:165:none:0": "args.json is None or a Path (always truthy)",
    "hisparse/bench/nixl.py:55:none:0": "an ImportFailed (exception) is always truthy",
    "hisparse/bench/nixl.py:76:reorder:0": "a median of two or more timings moved before a raise",
    "hisparse/connector.py:89:none:0": "a HiSparseCoordinator is always truthy",
    "hisparse/connectors/offloading.py:91:none:0": "no hashes: leading_stored gives 0 too",
    "hisparse/coordinator.py:339:loop:0": "a spill that found no room changes nothing: all fail",
    "hisparse/docs.py:26:arith:1": "mermaid_document() always ends with a newline",
    "hisparse/engine/schedule.py:113:loop:0": "started never falls: every later page continues",
    "hisparse/engine/schedule.py:92:none:0": "an Admission is always truthy",
    "hisparse/sharedpool.py:46:none:0": "an empty name attaches and fails either way",
    "hisparse/sharedpool.py:99:reorder:0": "unlink is by name: a closed mapping unlinks the same",
    "hisparse/simulate.py:129:none:0": "workload_path is None or a Path (always truthy)",
    "hisparse/simulate.py:466:loop:0": "the test ignores r: every later one continues",
    "hisparse/simulate.py:851:reorder:0": "distinct keys: the same document, the same order",
    "hisparse/sizing/baseline.py:69:none:0": "every arrival has a page: allocate gives [] never",
    "hisparse/sizing/cli.py:167:none:0": "args.json is None or a Path (always truthy)",
    "hisparse/sizing/cli.py:74:drop:0": "an option left out holds defaults[name] already",
    "hisparse/sizing/plan.py:106:reorder:0": "os.sysconf moved before a raise: it cannot fail",
    "hisparse/tlc/value.py:128:none:0": "every token matches one character or more",
    "hisparse/tlc/value.py:65:reorder:0": "a raising take() ends the parse: i is never read",
    "hisparse/tp/run.py:530:none:0": "the scheduler object is always truthy",
    "hisparse/transport/base.py:85:none:0": "dests of a bound chunk: a non-empty tuple",
    "hisparse/transport/staging.py:25:none:0": "the CUDA array interface is a non-empty dict",
    "hisparse/workerport.py:156:none:0": "a HiSparseWorkerMeta (pydantic model) is truthy",
    "hisparse/workerproc.py:82:none:0": "a shared pool's name is never empty",
    "hisparse/workload.py:123:reorder:0": "ceil of two checked ints moved before a raise",
    "spec/machine.py:1495:reorder:0": "dict.get moved before the 'none' return: pure",
    "spec/machine.py:1513:none:0": "a class is always truthy",
    "spec/record.py:19:bool:0": "steps and declared are set together (record=True)",
    "spec/state.py:191:none:0": "() and False: both falsy where the result is tested",
    "spec/suffix.py:118:reorder:0": "the plan is pure: computed and dropped for no lookup",
    "spec/suffix.py:144:none:0": "a SuffixState is always truthy",
    "spec/suffix_variants.py:64:none:0": "a SuffixVariant is always truthy",
    "spec/trace.py:388:reorder:0": "a pure comprehension moved before an append",
    "spec/trace.py:500:none:0": "a TraceHeader (pydantic model) is truthy",
    "spec/variants.py:65:none:0": "a Spill (NamedTuple of six) is always truthy",
    # the whole run's lines no test ran (docs/mutation-run7, ninth pass)
    "hisparse/bench/cli.py:265:none:2": "--json is None or a Path (out_path), always truthy",
    "hisparse/report.py:55:raise:0": "the loop returns on its last unit: never reached",
    "hisparse/simulate.py:314:none:19": "a SharedHostPool defines no __bool__/__len__: truthy",
    "hisparse/simulate.py:813:call:80": "tqdm's own iterator closed the bar (CPython)",
    "hisparse/transport/base.py:68:none:10": "dests of a bound chunk: a non-empty tuple",
    "spec/machine.py:485:loop:1": "a reader's meta carries no completed ack: never run",
    "hisparse/simulate.py:313:none:18": "the same edit as 314:none:19 before _recover was added",
    "spec/machine.py:259:int:6": "_gpu is called only for a block already out of range",
    "spec/machine.py:259:cmp:65": "_gpu is called only for a block already out of range",
    "spec/machine.py:317:none:62": "a GPU owner is None or a (request, page) pair: truthy",
    "hisparse/engine/tiling.py:41:cmp:2": "s reaching most stops one doubling later: min(s, most)",
    "hisparse/engine/tiling.py:41:var:7": "without s < most the loop only overshoots: min(s, most)",
    "hisparse/tlc/value.py:63:none:2": "every token take() is asked for is a non-empty literal",
    "hisparse/tlc/value.py:82:reorder:1": "an empty Fn built before a return: discarded",
    "hisparse/tlc/value.py:143:none:3": "a regex match object is always truthy",
    "hisparse/tp/run.py:362:none:5": "a GpuTimer defines no __bool__ or __len__: truthy",
    # the whole run's survivors on lines the suite runs (docs/mutation-run7, tenth pass)
    "hisparse/simulate.py:822:call:82": "tqdm's own iterator closed the bar (as 813:call:80)",
    "hisparse/pdimport/runner.py:260:reorder:4": "failure set before a release that cannot raise",
    "executor/validate.py:150:none:2": "limit is None or a PoolLayout count (at least 1)",
    "executor/validate.py:151:none:3": "limit is None or a PoolLayout count (at least 1)",
    "hisparse/tlc/output.py:81:int:0": "differs at exit 0 only, which EXIT_CODES names",
    "hisparse/tlc/output.py:81:cmp:1": "differs at exit 0 only, which EXIT_CODES names",
    "hisparse/tlc/output.py:114:reorder:1": "two pure reads of the output text swapped",
    "hisparse/tlc/output.py:127:reorder:2": "two pure reads of the output text swapped",
    "hisparse/sizing/cli.py:171:none:1": "--plot is None or a Path (out_path), always truthy",
    "hisparse/sizing/cli.py:210:none:10": "positive_float: None or above 0, never 0.0",
    "hisparse/cli.py:311:none:2": "checkout_root() is None or a Path, always truthy",
    "hisparse/bench/cli.py:229:none:1": "most is None or 4096 / 2^21, never 0",
    "spec/invariants.py:234:none:1": "a Spill (NamedTuple of six) is always truthy",
    "spec/invariants.py:303:none:17": "a copy's bytes are a key or a marker, never ''",
    "spec/invariants.py:442:none:25": "a Spill (NamedTuple of six) is always truthy",
    "spec/variants.py:54:none:5": "a Spill (NamedTuple of six) is always truthy",
    "spec/variants.py:69:call:4": "a pure lookup from phase enqueued, which never raises",
    "spec/variants.py:73:none:4": "a Spill (NamedTuple of six) is always truthy",
    "spec/variants.py:122:none:6": "a Spill (NamedTuple of six) is always truthy",
    "spec/machine.py:1407:none:56": "a Spill (NamedTuple of six) is always truthy",
    "spec/messages.py:252:none:8": "an empty cached field set is recomputed the same",
    "spec/suffix.py:140:none:1": "a SuffixState is always truthy",
    "hisparse/engine/schedule.py:141:none:2": "connector metadata (pydantic model) is truthy",
    "hisparse/engine/schedule.py:156:none:3": "a worker meta (pydantic model) is truthy",
    "hisparse/engine/offload.py:134:none:1": "None or a JSON object's bytes: never empty",
    "hisparse/engine/offload.py:113:reorder:0": "a pure list built before an early return",
    "hisparse/engine/workload.py:123:cmp:2": "one more first row, never reached by the cut",
    "hisparse/sizing/cli.py:71:none:4": "positive_float: None or above 0, never 0.0",
    "hisparse/sizing/cli.py:84:none:5": "positive_int: None or at least 1",
    "hisparse/sizing/cli.py:98:none:11": "positive_int: None or at least 1",
    "hisparse/sizing/cli.py:102:none:13": "None or one of three non-empty choices",
    "hisparse/sizing/cli.py:92:none:8": "PATH is None or a Path (in_file), always truthy",
    "hisparse/sizing/cli.py:146:none:9": "--plot is None or a Path (out_path), always truthy",
    "hisparse/cli.py:459:none:21": "positive_int: None or at least 1",
    "hisparse/cli.py:460:none:22": "positive_int: None or at least 1",
    "hisparse/cli.py:589:none:17": "--plot is None or a Path (out_path), always truthy",
    "hisparse/cli.py:595:none:8": "--plot is None or a Path (out_path), always truthy",
    "spec/catalogue.py:612:reorder:1": "pure set-building moved before an append-only if",
    "spec/catalogue.py:629:reorder:7": "a pure regex match moved before a continue",
    "spec/catalogue.py:637:reorder:11": "a pure findall moved before an append-only if",
    "spec/catalogue.py:650:reorder:9": "a read of the spec moved before an append-only if",
    "spec/catalogue.py:656:reorder:10": "a read of the method moved before an append-only if",
    "spec/catalogue.py:676:reorder:3": "the source read moved before an append-only if",
    "spec/catalogue.py:669:reorder:12": "a getattr on the class moved before an append",
    "spec/machine.py:1153:reorder:47": "a dict get moved before an append to the moves",
    "hisparse/indexer_sim.py:213:reorder:8": "job-done and restore bookkeeping: disjoint state",
    "hisparse/sizing/plan.py:131:reorder:1": "pure arithmetic moved before a refusal",
    "hisparse/sizing/plan.py:125:var:20": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:126:var:21": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:129:var:24": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:130:var:25": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:134:var:27": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:131:var:28": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:142:var:40": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:111:var:10": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:112:var:11": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:112:var:12": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:112:var:13": "g is geometry (an alias, removed since)",
    "hisparse/sizing/plan.py:116:var:16": "g is geometry (an alias, removed since)",
    "hisparse/simulate.py:278:none:41": "a SharedHostPool defines no __bool__/__len__: truthy",
    "spec/machine.py:902:none:63": "a GPU owner is None or a (request, page) pair: truthy",
    "hisparse/indexer_sim.py:144:none:2": "an Admission (NamedTuple of three) is always truthy",
    "hisparse/indexer_sim.py:186:reorder:3": "a released request always has its indexer blocks",
    "hisparse/indexer_sim.py:184:none:4": "indexer blocks: one per page, never empty",
    "hisparse/indexer_sim.py:199:none:5": "indexer blocks to free: one per page, never empty",
    "hisparse/indexer_sim.py:197:reorder:4": "a key deleted and put back: only dict order moves",
    "hisparse/indexer_sim.py:269:call:29": "the drain's own rounds left nothing to deliver",
    "hisparse/indexer_sim.py:221:reorder:5": "stage stores a reference; the metrics only read",
    "hisparse/indexer_sim.py:219:none:6": "connector metadata (pydantic model) is truthy",
    "hisparse/indexer_sim.py:229:none:8": "None or a non-empty JSON object's bytes",
    "hisparse/indexer_sim.py:233:reorder:7": "immutable bytes: metrics and children read apart",
    "hisparse/connectors/offloading.py:200:reorder:6": "an append to a fresh local list moved",
    "hisparse/connectors/offload_store.py:163:reorder:3": "an append to a local list moved",
    "hisparse/connectors/offload_store.py:162:call:5": "the key was just set: already last",
    "hisparse/connectors/offloading.py:165:none:2": "OffloadMetadata (pydantic model) is truthy",
    "hisparse/connectors/offloading.py:133:none:1": "a Job (frozen dataclass) is always truthy",
    "hisparse/workerproc.py:69:none:3": "a LocalWorker defines no __bool__/__len__: truthy",
    "hisparse/pdimport/sim.py:139:reorder:1": "the figure count and the drop touch apart",
    "hisparse/bench/churn.py:79:reorder:1": "attribute of an object whose __post_init__ raises",
    "hisparse/coordinator.py:530:none:16": "a Loc is None or a (tier, block) pair: truthy",
    "hisparse/tp/run.py:164:loop:1": "past the bound every later request is skipped too",
    "hisparse/tp/run.py:166:none:9": "an Admission (NamedTuple of three) is always truthy",
    "hisparse/tp/run.py:183:none:13": "connector metadata (pydantic model) is always truthy",
    "hisparse/tp/run.py:515:none:7": "a Scheduler defines no __bool__/__len__: truthy",
    "hisparse/tp/run.py:546:none:1": "close is None or a bound method (truthy)",
    "hisparse/tp/run.py:282:none:3": "timer is None or a function (truthy)",
    "hisparse/tp/run.py:356:none:11": "a CuPy Stream has no __bool__/__len__: truthy (H200)",
    "hisparse/tp/run.py:267:reorder:7": "a pure array built before an early return: discarded",
    "hisparse/tp/run.py:307:int:5": "position 0 is page 0 on either branch",
    "hisparse/tp/run.py:307:cmp:26": "position 0 is page 0 on either branch",
    "hisparse/tp/run.py:309:int:10": "position 0 is offset 0 on either branch",
    "hisparse/tp/run.py:309:cmp:42": "position 0 is offset 0 on either branch",
    "hisparse/tp/run.py:323:int:9": "row 0 is row 0 on either branch",
    "hisparse/tp/run.py:323:cmp:39": "row 0 is row 0 on either branch",
    "hisparse/tp/run.py:507:reorder:12": "the done plan admits none; its releases are not read",
    "hisparse/config.py:153:none:3": "gpu_kv_gib is None or above 0 (gt=0), never 0.0",
    "hisparse/cli.py:546:none:6": "--json is None or a Path (out_path), always truthy",
    "hisparse/cli.py:548:none:7": "--plot is None or a Path (out_path), always truthy",
    "hisparse/workerproc.py:133:call:23": "the close's answer read from a pipe closed next",
    # the whole run, eleventh pass (docs/mutation-run7): survivors on lines the suite runs
    "hisparse/cli.py:469:none:23": "positive_int: None or at least 1, never 0",
    "hisparse/cli.py:478:none:25": "positive_int: None or at least 1, never 0",
    "hisparse/cli.py:452:none:19": "positive_int: None or at least 1, never 0",
    "hisparse/cli.py:452:none:20": "positive_int: None or at least 1, never 0",
    "hisparse/cli.py:463:none:4": "positive_float: None or above 0, never 0.0",
    "hisparse/cli.py:448:none:3": "positive_float: None or above 0, never 0.0",
    "hisparse/cli.py:461:none:12": "a pool size: a flag's, the toy trace's (56 up) or None",
    "hisparse/cli.py:462:none:13": "a pool size: a flag's, the toy trace's (224 up) or None",
    "hisparse/cli.py:443:none:11": "PATH is None or a Path (in_file), always truthy",
    "hisparse/cli.py:445:none:18": "PATH is None or a Path (in_file), always truthy",
    "hisparse/cli.py:505:none:5": "--model is None or a MODELS name (non-empty)",
    "hisparse/simulate.py:566:none:36": "a request status is None or a REQUEST state (non-empty)",
    "hisparse/simulate.py:131:reorder:1": "a plain frozen dataclass built before a raise",
    "hisparse/msgshape.py:208:reorder:7": "an append to a local list read only after the loop",
    "spec/machine.py:1248:none:65": "a loc entry is None or a (tier, block) pair: truthy",
    "spec/machine.py:1123:none:53": "a PgImp (NamedTuple of four) is always truthy",
    "spec/machine.py:1122:reorder:41": "pg.pop moved before a branch that never reads pg",
    "executor/accounting.py:192:reorder:2": "a pure NumPy expression moved before a raise",
    "hisparse/simulate.py:521:none:7": "admit_import gives None, device or host (non-empty)",
    "hisparse/cli.py:519:none:14": "--plot is None or a Path (out_path), always truthy",
    "hisparse/config.py:143:none:2": "gpu_kv_gib is None or above 0 (gt=0), never 0.0",
    "hisparse/sharedpool.py:150:reorder:2": "check_spills is pure; enqueue_spills runs it first",
    "hisparse/coordinator.py:401:bool:21": "the machine leases the lowest free hosts as _host_free",
    "hisparse/msgshape.py:201:reorder:6": "an append to a local list read only after the loop",
    "hisparse/bench/nixl.py:57:reorder:1": "a local list read by none, dropped with the same raise",
    "hisparse/pdimport/runner.py:169:none:2": "live holds _Import records (no __bool__): truthy",
    "hisparse/pdimport/runner.py:169:none:3": "a failure is None or a 2-tuple: truthy",
    "hisparse/pdimport/runner.py:355:none:11": "dests: None or a tuple; an empty one adds none",
    "hisparse/pdimport/runner.py:359:none:12": "a bound chunk's dests: one per page, at least one",
    "spec/machine.py:841:none:61": "a GPU owner is None or a (request, page) pair: truthy",
    "spec/machine.py:905:none:64": "a GPU owner is None or a (request, page) pair: truthy",
    "spec/machine.py:1041:none:51": "a PgImp (NamedTuple of four) is always truthy",
    "spec/invariants.py:95:none:12": "differs only when host_blocks < 1: the config refuses it",
    "spec/machine.py:941:reorder:20": "the leasing loops neither read s.imp nor raise",
    "spec/machine.py:871:reorder:17": "target_for is pure; only a str claim differs (mypyc)",
    "spec/machine.py:989:reorder:22": "pure for a typed page; only a float index differs (mypyc)",
    "hisparse/coordinator.py:395:none:3": "BlockPool.allocate(n >= 1) gives None or n blocks",
    "spec/machine.py:813:none:33": "an empty declared dict fails the next test too",
    "hisparse/worker.py:256:none:4": "an ImportRunner defines no __bool__/__len__: truthy",
    "hisparse/msgshape.py:180:reorder:5": "an append to a local list dropped with the return",
    "hisparse/msgshape.py:178:none:7": "import_command_problem gives None or a non-empty text",
    "hisparse/msgshape.py:155:none:6": "_int_fields gives None or a non-empty text",
    "hisparse/pdimport/runner.py:138:none:8": "differs at block 0 only, which 0 <= 0 < n passes",
    "hisparse/pdimport/runner.py:141:none:9": "differs at block 0 only, which 0 <= 0 < n passes",
    "hisparse/pdimport/runner.py:301:var:2": "ready is never empty there; release([]) does nothing",
    "hisparse/pdimport/runner.py:181:none:4": "handle.error is None or an ImportFailed: truthy",
    "hisparse/pdimport/runner.py:364:none:7": "a failure is None or a 2-tuple: truthy",
    "hisparse/pdimport/runner.py:321:none:5": "batched is None or a bound method: truthy",
    "spec/messages.py:88:none:1": "import_command_problem gives None or a non-empty text",
    "executor/reference.py:156:reorder:4": "pure arithmetic on an int block moved before a raise",
    "hisparse/simulate.py:880:reorder:0": "rates() is pure; the keys come out in the same order",
    "spec/machine.py:480:none:60": "a Spill (NamedTuple of six) is always truthy",
    "spec/machine.py:1216:none:55": "a copy's bytes are a key or a marker, never empty",
    "spec/machine.py:897:reorder:18": "_admit_target is pure and cannot raise there",
    "hisparse/transport/base.py:175:reorder:8": "the failing chunk's dests are None: no unbind",
    "hisparse/transport/nixlpeer.py:130:none:2": "differs at pid 0 only; a child's pid is above 0",
    # the whole run, twelfth pass (docs/mutation-run7): survivors on lines the suite runs
    "spec/trace.py:339:none:5": "p.req is None or a dict: an empty one passes the subset test too",
    "spec/trace.py:388:none:2": "a hostKey value is None or a Name (non-empty by its pattern)",
    "spec/trace.py:486:none:3": "a TraceHeader (pydantic, no __bool__/__len__) is always truthy",
    "hisparse/transport/base.py:278:none:6": "handle.error is None or an ImportFailed: truthy",
    "hisparse/transport/nixlpeer.py:122:call:22": "join waits for the exit, after the reply",
    "hisparse/transport/nixlpeer.py:119:none:1": "exitcode 0 means not alive: both tests fail",
    "hisparse/transport/base.py:292:reorder:4": "poll returns at once on an ended handle",
    "hisparse/transport/base.py:184:none:5": "handle.error is None or an ImportFailed: truthy",
    "hisparse/transport/base.py:259:none:2": "handle.error is None or an ImportFailed: truthy",
    "hisparse/transport/base.py:169:none:1": "an empty lease list is refused above",
    "hisparse/transport/base.py:264:loop:1": "budget never grows: every later chunk stops",
    "spec/machine.py:1451:loop:4": "enabled() changes nothing: lost[w] holds for every later tid",
    "hisparse/transport/nixlpeer.py:119:bool:2": "exitcode is None exactly while alive",
    "hisparse/coordinator.py:532:none:16": "a Loc is None or a (tier, block) pair: truthy",
    "hisparse/coordinator.py:525:reorder:7": "a pure read moved before an early return",
    "hisparse/coordinator.py:397:none:3": "BlockPool.allocate(n >= 1) gives None or n blocks",
    "hisparse/pdimport/runner.py:374:none:14": "an ImportFailed (exception) is always truthy",
    "hisparse/pdimport/runner.py:369:none:13": "an ImportFailed (exception) is always truthy",
    "hisparse/pdimport/runner.py:363:bool:3": "done iff every chunk copied, where read",
    "spec/trace.py:342:none:6": "{} and False are both false where read",
    "spec/trace.py:490:none:1": "a TraceHeader (pydantic model) is always truthy",
    "hisparse/transport/loopback.py:112:reorder:1": "pure region lookup moved before a return",
    "hisparse/transport/loopback.py:124:reorder:3": "a pure reshape moved before a raise",
    "hisparse/pdimport/runner.py:304:var:2": "ready is never empty there; release([]) does nothing",
    # the whole run, thirteenth pass (docs/mutation-run7): GPU-only lines, run on an H100
    "hisparse/tp/run.py:367:call:35": "the spin only holds the stream: timing only",
    "hisparse/tp/run.py:426:reorder:2": "the open file stays mapped after the unlink",
    "hisparse/tp/run.py:521:bool:12": "rank 0 reads 0; a reader's records start at 1",
    # the whole run, thirteenth pass: survivors on lines the suite runs (CPU)
    "hisparse/simulate.py:674:none:30": "a SharedHostPool has no __bool__/__len__: truthy",
    "hisparse/simulate.py:674:cmp:63": "with one rank both branches call on_worker_lost(rank 0)",
    "hisparse/simulate.py:598:none:40": "a HiSparseMetrics has no __bool__/__len__: truthy",
    "hisparse/simulate.py:610:none:10": "a HiSparseMetrics has no __bool__/__len__: truthy",
    "hisparse/simulate.py:765:none:32": "a PdSide has no __bool__/__len__: truthy",
    "hisparse/simulate.py:826:none:16": "a PdSide has no __bool__/__len__: truthy",
    "hisparse/simulate.py:829:none:17": "trace is None or a Path (always truthy)",
    "hisparse/simulate.py:828:reorder:10": "the notes read spills, misses, too_large: not imports",
    "spec/trace.py:277:reorder:1": "a pure set difference moved before a raise",
    "spec/machine.py:250:int:5": "every caller refused 0 <= h < N already",
    "spec/machine.py:1460:none:57": "a copying entry is None or a non-empty key",
    "spec/machine.py:1472:none:58": "a retire refusal is None or a non-empty text",
    "spec/machine.py:255:cmp:153": "_rank is reached only for a rank its caller refused",
    "hisparse/tracecheck/encode.py:83:reorder:0": "a pure set built before an early return",
    "spec/observe.py:23:none:1": "a Page is a (request, index) pair: truthy",
    "spec/observe.py:136:none:2": "a Loc is None or a (tier, block) pair: truthy",
    "spec/observe.py:144:var:2": "a variable's lists are per block: one length",
    "spec/observe.py:147:var:7": "a variable's lists are per block: one length",
    "spec/machine.py:151:none:41": "a declared key tuple is never empty (refused above)",
    "spec/machine.py:1433:int:19": "_rank(a, 0) does not raise: the same path follows",
    "spec/machine.py:1433:cmp:146": "_rank(a, 0) does not raise: the same path follows",
    "hisparse/coordinator.py:341:loop:0": "no host room, no LRU victim: every later spill too",
    # the whole run, fourteenth pass (docs/mutation-run7): survivors on lines the suite runs
    "spec/machine.py:556:none:9": "a Spill is None or a NamedTuple: truthy",
    "spec/machine.py:1400:int:18": "_rank(a, 0) does not raise: the same path follows",
    "spec/machine.py:1405:var:114": "no _executes_replay variant reads src",
    "spec/machine.py:1400:cmp:144": "_rank(a, 0) does not raise: the same path follows",
    "spec/machine.py:1405:var:116": "no _executes_replay variant reads w",
    "spec/catalogue.py:470:none:1": "a Spill is None or a NamedTuple: truthy",
    "spec/machine.py:315:none:59": "a Page is None or a (request, index) pair",
    "hisparse/coordinator.py:769:var:21": "w = rank: the same value under either name",
    "hisparse/coordinator.py:768:var:20": "w = rank: the same value under either name",
    "hisparse/coordinator.py:762:var:19": "w = rank: the same value under either name",
    "hisparse/coordinator.py:773:var:22": "w = rank: the same value under either name",
    "spec/machine.py:1174:int:11": "_rank(a, 0) does not raise: the same path follows",
    "spec/machine.py:1177:none:13": "a Transfer is None or a NamedTuple: truthy",
    "spec/machine.py:1174:cmp:133": "_rank(a, 0) does not raise: the same path follows",
    "hisparse/coordinator.py:627:none:25": "a Loc is None or a (tier, block) pair: truthy",
    "hisparse/coordinator.py:775:var:23": "w = rank: the same value under either name",
    "hisparse/coordinator.py:792:var:24": "w = rank: the same value under either name",
    "hisparse/coordinator.py:793:var:25": "w = rank: the same value under either name",
    "hisparse/coordinator.py:794:var:26": "w = rank: the same value under either name",
    "hisparse/coordinator.py:774:none:22": "a Spill is None or a NamedTuple: truthy",
    "hisparse/coordinator.py:757:var:17": "w = rank: the same value under either name",
    "hisparse/coordinator.py:757:var:18": "w = rank: the same value under either name",
    "hisparse/coordinator.py:754:var:16": "w = rank: the same value under either name",
    "hisparse/coordinator.py:754:var:15": "w = rank: the same value under either name",
    "hisparse/worker.py:290:reorder:4": "the importer and the down channel share no state",
    "hisparse/worker.py:288:none:7": "an ImportRunner has no __bool__/__len__: truthy",
    "spec/machine.py:421:none:27": "a Loc is None or a (tier, block) pair: truthy",
    "spec/machine.py:416:none:26": "a declared key tuple is never empty (refused above)",
    "hisparse/simulate.py:584:cmp:55": "random() hits the threshold exactly w.p. 2**-53",
    "hisparse/simulate.py:823:reorder:19": "the progress bar and the workers share no state",
    "hisparse/simulate.py:608:cmp:56": "random() hits the threshold exactly w.p. 2**-53",
    "hisparse/simulate.py:570:none:8": "a PdSide has no __bool__/__len__: truthy",
    "hisparse/coordinator.py:589:none:9": "a Transfer is None or a NamedTuple: truthy",
    "spec/machine.py:1356:call:155": "a lifecycle check; legal in every state reached",
    "spec/machine.py:196:none:2": "a Page is None or a (request, index) pair",
    "spec/machine.py:202:none:3": "a Page is None or a (request, index) pair",
    "spec/machine.py:1357:reorder:46": "a pure lifecycle check of the old phase moved",
    "spec/machine.py:1360:call:98": "a lifecycle check; legal in every state reached",
    "spec/machine.py:306:none:24": "inside if m: given hosts has m > 0 entries",
    "spec/machine.py:1341:none:40": "a copying entry is None or a non-empty key",
    "spec/machine.py:1359:reorder:44": "a pure predicate moved before a continue",
    "spec/machine.py:1327:cmp:141": "_rank(a, 0) does not raise: the same path follows",
    "spec/machine.py:1327:int:17": "_rank(a, 0) does not raise: the same path follows",
    "hisparse/simulate.py:478:reorder:15": "_admitted never reads running",
    "executor/resolver.py:97:reorder:3": "a pure dict lookup moved before a continue",
    "hisparse/simulate.py:689:none:37": "a MessageFaults has no __bool__/__len__: truthy",
    "executor/resolver.py:109:reorder:2": "pure _victims moved before the capacity raise",
    "executor/resolver.py:90:var:20": "the step is never NO_ENTRY; -1 is never looked up",
    "hisparse/simulate.py:472:none:25": "an Admission is None or a NamedTuple: truthy",
    "hisparse/simulate.py:685:reorder:17": "on_connector_meta does not change the meta",
    "hisparse/simulate.py:658:none:29": "a MessageFaults has no __bool__/__len__: truthy",
    "spec/machine.py:740:int:10": "_host(a, 0) does not raise: the same path follows",
    "hisparse/simulate.py:655:none:28": "a HiSparseMetrics has no __bool__/__len__: truthy",
    "spec/machine.py:740:cmp:91": "_host(a, 0) does not raise: the same path follows",
    "hisparse/simulate.py:683:none:31": "a HiSparseMetrics has no __bool__/__len__: truthy",
}


LATER = "killed later"  # survived the run, killed when run again with the tests added since

# mutants of GPU-only lines (no CPU test runs them) that the GPU test killed: on an H200
# (run 5), then on an H100 (run 7: the whole run's GPU-only survivors)
_DOCS = Path(__file__).resolve().parents[2] / "docs"
GPU_RUNS = (_DOCS / "mutation-run5/tprun_gpu_mutants.json", _DOCS / "mutation-run7/tprun_gpu.json")


def gpu_kills() -> dict[str, str]:
    """The GPU runs' kills: id -> the test file that ran on the GPU."""
    out: dict[str, str] = {}
    for path in GPU_RUNS:
        doc = json.loads(path.read_text())
        tests = " ".join(doc["tests"])
        out.update({o["id"]: tests for o in doc["outcomes"] if o["status"] in (KILLED, TIMEOUT)})
    return out


def _row(key: str, gen: int, c: Counter[str]) -> str:
    run = sum(c.values())
    killed = c[KILLED] + c[TIMEOUT]
    decided = run - c["equivalent"] - c["error"]
    share = f"{100 * (killed + c[LATER]) / decided:.1f} %" if decided else "-"
    return (f"| {key} | {gen} | {run} | {killed} | {c[LATER]} | {c['equivalent']} "
            f"| {c[SURVIVED]} | {c['error']} | {share} |")


def statuses(doc: dict[str, Any], rerun: dict[str, Any] | None = None) -> list[str]:
    """Each outcome's verdict: a survivor is ``LATER`` if ``rerun`` (its survivors run
    again on a later tree, each outcome naming the one it re-ran in ``of``) killed it,
    ``equivalent`` if argued so, else survived."""
    later = {o.get("of", o["id"]): o["status"] for o in (rerun or {}).get("outcomes", [])}
    gpu = gpu_kills()
    out = []
    for o in doc["outcomes"]:
        status = o["status"]
        if status == SURVIVED and (later.get(o["id"]) in (KILLED, TIMEOUT) or o["id"] in gpu):
            status = LATER
        elif status == SURVIVED and o["id"] in EQUIVALENT:
            status = "equivalent"
        out.append(status)
    return out


def tables(doc: dict[str, Any], rerun: dict[str, Any] | None = None) -> str:
    """Markdown tables of one run's JSON document (and of its survivors' re-run)."""
    by_op: dict[str, Counter[str]] = {}
    by_file: dict[str, Counter[str]] = {}
    for o, status in zip(doc["outcomes"], statuses(doc, rerun), strict=True):
        by_op.setdefault(o["operator"], Counter())[status] += 1
        by_file.setdefault(o["file"], Counter())[status] += 1
    head = ("| {} | generated | run | killed | killed later | equivalent | survived | error "
            "| killed of non-equivalent run |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    out = [head.format("operator")]
    for op, gen in doc["generated_by_operator"].items():
        out.append(_row(op, gen, by_op.get(op, Counter())))
    total: Counter[str] = Counter()
    for c in by_op.values():
        total.update(c)
    out.append(_row("**all**", sum(doc["generated_by_operator"].values()), total))
    out += ["", head.format("file")]
    for file, gen in doc["generated_by_file"].items():
        out.append(_row(f"`{file}`", gen, by_file.get(file, Counter())))
    return "\n".join(out)


def survivors(doc: dict[str, Any], rerun: dict[str, Any] | None = None) -> str:
    """A markdown table of the run's survivors and what became of each: the test that
    killed it when run again, or the argument it is equivalent by, or still open."""
    later = {o.get("of", o["id"]): o for o in (rerun or {}).get("outcomes", [])}
    gpu = gpu_kills()
    rows = ["| mutant | edited line | now |", "|---|---|---|"]
    for o in doc["outcomes"]:
        if o["status"] != SURVIVED:
            continue
        again = later.get(o["id"])
        if again is not None and again["status"] in (KILLED, TIMEOUT):
            now = f"killed by `{again.get('killer') or again['status']}`"
        elif o["id"] in gpu:
            now = f"killed on the H200 by `{gpu[o['id']]}` (GPU-only lines; docs/mutation-run5/)"
        elif o["id"] in EQUIVALENT:
            now = f"equivalent: {EQUIVALENT[o['id']]}"
        else:
            now = "**survives**"
        line = o["before"].replace("|", "\\|")
        rows.append(f"| `{o['id']}` | `{line}` | {now} |")
    return "\n".join(rows)


def unreached(doc: dict[str, Any]) -> list[str]:
    """Files of the selection the run did not reach at all."""
    ran = {o["file"] for o in doc["outcomes"]}
    return [f for f, n in doc["selected_by_file"].items() if n and f not in ran]


def main(path: Path, rerun: Path | None = None, with_survivors: bool = False) -> str:
    doc = json.loads(path.read_text())
    again = json.loads(rerun.read_text()) if rerun else None
    lines = [tables(doc, again)]
    if with_survivors:
        lines += ["", survivors(doc, again)]
    miss = unreached(doc)
    if miss:
        lines.append("\nNot reached: " + ", ".join(f"`{f}`" for f in miss))
    return "\n".join(lines)
