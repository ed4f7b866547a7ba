"""The capacity model's arithmetic (bench/capacity.py, ADR 33) on round figures worked by hand,
and its reading of the committed bench/results files."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from testkit import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # the benches are scripts, not a package
import capacity
from capacity import OUTSIDE, Measured, ceilings, one_machine_check, project, restore_s

ROUND = Measured(
    cores=2,
    decider_inputs_per_s=4_000,
    inputs_per_workflow=20,
    events_per_workflow=40,
    tasks_per_workflow=10,
    inputs_per_transaction=100,
    dispatcher_tasks_per_s=4_000,
    pg_events_per_s=5_000,
    search_events_per_s=5_000,
    restore_records_per_s=10_000,
    records_per_state=2,
    kib_per_state=4,
    cpu_ms_per_workflow=40,
    broker_records_per_s=30_000,
    e2e_workflows_per_s=40,
    side_by_side_workflows_per_s=None,
    sources=(),
)
PARAMS = {
    **OUTSIDE,
    "replication_factor": 3,
    "partitions_per_broker": 4_000,
    "partitions_per_cluster": 200_000,
    "txn_per_s_per_broker": 1_000,
    "pg_row_writes_per_s": 80_000,
    "pg_rows_per_event": 2,
    "search_docs_per_s_per_node": 20_000,
    "search_docs_per_event": 2,
    "machines_per_search_node": 4,
    "decider_partitions": 64,
    "workflow_keyed_topics": 10,
    "retain_finished_s": 3_600,
}


def test_records_per_workflow_counts_inputs_snapshots_events_ready_and_assignments() -> None:
    assert capacity.records_per_workflow(ROUND) == 2 * 20 + 40 + 2 * 10


def test_records_counted_on_the_topics_replace_the_estimate() -> None:
    counted = dataclasses.replace(ROUND, records_per_workflow_measured=150.0)
    assert capacity.records_per_workflow(counted) == 150.0
    assert ceilings(counted, 1, PARAMS)["broker"] == 30_000 / 150


def test_each_ceiling_on_one_machine_worked_by_hand() -> None:
    c = ceilings(ROUND, 1, PARAMS)
    assert c["cpu"] == 2 * 1000 / 40  # 50 workflows/s
    assert c["broker"] == 30_000 / (100 * 1)  # one broker: replication capped at 1
    assert c["transactions"] == 1_000 / (20 / 100)  # a workflow is a fifth of a txn: 5,000
    assert c["partitions"] == 12 * 4_000 / 20  # 12 partitions, one process each
    assert c["postgres"] == 80_000 / (40 * 2)  # 1,000
    assert c["search"] == 1 * 20_000 / (40 * 2)  # one node: 250


def test_machines_multiply_cpu_brokers_and_search_nodes_but_not_the_postgres_primary() -> None:
    one, hundred = ceilings(ROUND, 1, PARAMS), ceilings(ROUND, 100, PARAMS)
    assert hundred["cpu"] == 100 * one["cpu"]
    assert hundred["broker"] == 100 * 30_000 / (100 * 3)  # replication 3 from 3 brokers on
    assert hundred["search"] == 25 * 20_000 / 80
    assert hundred["postgres"] == one["postgres"]
    assert hundred["partitions"] == 64 * 4_000 / 20


def test_a_partition_count_past_the_guidance_is_no_ceiling_at_all() -> None:
    tight = {**PARAMS, "partitions_per_broker": 100}  # 64 * 10 * 3 replicas > 10 * 100
    assert ceilings(ROUND, 10, tight)["partitions"] == 0.0


def test_the_first_limit_is_the_smallest_ceiling_and_the_read_side_does_not_cap_writes() -> None:
    rows = {r["machines"]: r for r in project(ROUND, PARAMS)}
    assert (rows[1]["first_limit"], rows[1]["write_path_workflows_per_second"]) == ("cpu", 50)
    assert rows[1]["read_models_keep_up_to"] == 250  # search, one node
    # 100 machines: cpu allows 5,000, the one PostgreSQL primary 1,000
    assert rows[100]["first_limit"] == "postgres"
    assert rows[100]["ceilings"]["broker"] == 100 * 30_000 / (100 * 3)  # 10,000
    assert rows[100]["write_path_workflows_per_second"] == 5_000  # cpu, not postgres
    assert rows[100]["read_models_keep_up_to"] == 1_000
    assert rows[100]["pg_events_per_second"] == 1_000 * 40


def test_restore_time_is_a_machines_share_of_the_retained_states_at_the_restore_rate() -> None:
    # 50 workflows/s on one machine, each state kept an hour: 180,000 states, 360,000 records
    assert restore_s(ROUND, 50, 1, PARAMS) == 36.0
    assert restore_s(ROUND, 500, 10, PARAMS) == 36.0  # same share per machine


def test_a_media_states_extra_decode_adds_to_each_restored_state() -> None:
    media = dataclasses.replace(ROUND, restore_media_extra_us=100.0)
    # 180,000 states: 36 s at the one-task rate + 100 us more each = 18 s
    assert restore_s(media, 50, 1, PARAMS) == pytest.approx(54.0)


def test_the_one_machine_check_reports_the_error_in_percent() -> None:
    check = one_machine_check(dataclasses.replace(ROUND, side_by_side_workflows_per_s=62.5))
    assert check["predicted_workflows_per_second"] == 50
    assert check["e2e_error_percent"] == 25.0  # 50 vs 40 measured
    assert check["side_by_side_error_percent"] == -20.0
    assert check["decider_one_core_workflows_per_second"] == 200


def test_the_committed_results_load_and_the_doc_block_is_what_they_generate() -> None:
    m = capacity.measured()
    assert m.inputs_per_workflow > 0 and m.events_per_workflow > 0 and m.cores >= 1
    doc = Path(capacity.DOC).read_text()
    block = capacity.render(m, project(m), one_machine_check(m))
    assert f"{capacity.BEGIN}\n{block}\n{capacity.END}" in doc, (
        "docs/capacity.md is stale: run bench/capacity.py"
    )


@pytest.mark.parametrize("machines", capacity.SCALES)
def test_every_scale_names_a_known_limit(machines: int) -> None:
    row = next(r for r in project(ROUND, PARAMS) if r["machines"] == machines)
    assert row["first_limit"] in row["ceilings"] and row["next_limit"] in row["ceilings"]
