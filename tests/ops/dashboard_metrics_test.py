#!/usr/bin/env python3
"""Every metric the Grafana dashboard and the alert rules query is one kvgov
exports, with the labels they group and match on.

Usage: dashboard_metrics_test.py KVGOV_BINARY SOURCE_DIR

Starts `kvgov serve` on a free loopback port with one engine (nobody
publishes on its socket; its per-worker series exist all the same), makes it
route once and take a few reports so the labelled families have samples,
scrapes /metrics, and checks deploy/grafana/kvgov.json and
deploy/prometheus/kvgov-alerts.yml:

  - every metric name in every PromQL expression (panel targets and
    template-variable queries) is a series kvgov exports: counters and
    gauges by their family name, histograms only as _bucket/_sum/_count;
  - every label an expression groups by or matches on exists on that
    metric's samples (job and instance come from Prometheus), and every
    `label="value"` matcher names a value kvgov exports;
  - savings (kvgov_prefill_tokens_saved_total) are always kept per source
    and never stacked: one series per source, never a sum across sources.

The alert rules may also use `up`, which Prometheus makes itself.
"""

import json
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvgov_ops import (Kvgov, TestFailure, analyze_promql, free_port, http,  # noqa: E402
                       parse_exposition, run_main, series_names)

TARGET_LABELS = {"job", "instance"}  # attached by Prometheus at scrape time
SAVINGS = "kvgov_prefill_tokens_saved_total"


def dashboard_queries(dashboard):
    """[(where, expr, panel)] for every target and template query."""
    queries = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                expr = target.get("expr", "")
                where = f"panel '{panel.get('title')}' target {target.get('refId')}"
                if not expr.strip():
                    raise TestFailure(f"{where}: empty expr")
                queries.append((where, expr, panel))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else query
        where = f"variable '{variable.get('name')}'"
        label_values = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*",
                                    text or "")
        if not label_values:
            raise TestFailure(f"{where}: want label_values(SELECTOR, LABEL), got {text!r}")
        # The label is looked up on the selector's series: check it as a grouping.
        queries.append((where, f"count by ({label_values.group(2)}) ({label_values.group(1)})",
                        None))
    return queries


def rule_queries(path):
    """[(where, expr)] of a rule file, read line by line: `expr:` holds the
    expression on the same line, or a `|` block below it."""
    queries = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    alert = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("- alert:") or stripped.startswith("- record:"):
            alert = stripped.split(":", 1)[1].strip()
        if stripped.startswith("expr:"):
            value = stripped[len("expr:"):].strip()
            if value in ("|", "|-", ">", ">-"):
                indent = len(line) - len(line.lstrip())
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or
                                          len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i].strip())
                    i += 1
                value = " ".join(block)
                queries.append((f"rule {alert}", value))
                continue
            queries.append((f"rule {alert}", value.strip("'\"")))
        i += 1
    if not queries:
        raise TestFailure(f"{path}: no expr: lines found")
    return queries


def populate(kvgov):
    """Gives the labelled families samples: a route, a route with no eligible
    worker, a provider saving, a transfer with bytes, a lease grant and a
    refused lease event."""
    route = {"model": "sim-model", "tenant": "t1", "token_ids": list(range(64))}
    status, body = http("POST", kvgov.url + "/v1/route", route)
    if status != 200:
        raise TestFailure(f"POST /v1/route: {status} {body}")
    for method, want in (("POST", 200), (None, 503), ("DELETE", 200)):
        if method is None:
            status, body = http("POST", kvgov.url + "/v1/route", route)
        else:
            status, body = http(method, kvgov.url + "/v1/workers/w1/drain")
        if status != want:
            raise TestFailure(f"{method or 'POST /v1/route while drained'}: want {want}, "
                              f"got {status} {body}")
    events = {"events": [
        {"type": "provider_cache", "provider": "openai", "model_id": "gpt-x",
         "cached_tokens": 1024, "prompt_tokens": 2048},
        {"type": "kv_transfer", "direction": "offload", "span_digest": "s1", "tokens": 64,
         "from_tier": "hbm", "to_tier": "dram", "bytes_moved": 4096},
        {"type": "nixl_lease", "lease_id": "l1", "event": "create", "role": "prefill_pin",
         "remote_engine": "w1", "span_digest": "1", "ttl_ms": 600000},
        {"type": "nixl_lease", "lease_id": "never-created", "event": "heartbeat",
         "role": "prefill_pin"},
    ]}
    status, body = http("POST", kvgov.url + "/v1/events", events)
    if status != 200:
        raise TestFailure(f"POST /v1/events: {status} {body}")
    answer = json.loads(body)
    if answer["accepted"] != 3:
        raise TestFailure(f"POST /v1/events: want 3 accepted and the stray heartbeat "
                          f"rejected, got {body}")


def check(queries, exported, label_sets, label_values, allow=()):
    problems = []
    checked = 0
    for where, expr, panel in queries:
        found = analyze_promql(expr)
        names = found["names"]
        if not names:
            problems.append(f"{where}: names no metric: {expr}")
        for name in sorted(names):
            if name in allow:
                continue
            if name not in exported:
                family = name[:-len(suffix)] if (suffix := next(
                    (s for s in ("_bucket", "_sum", "_count") if name.endswith(s)), "")) else name
                hint = ""
                if name in label_sets or family in exported.values():
                    hint = " (a histogram: use _bucket, _sum or _count)"
                problems.append(f"{where}: '{name}' is not a series kvgov exports{hint}: {expr}")
                continue
            checked += 1
            labels = label_sets.get(name)
            if labels is None:
                continue  # exported, but no samples in this scrape to read labels from
            for label in sorted(found["grouping"] - TARGET_LABELS):
                if label not in labels:
                    problems.append(f"{where}: groups by '{label}', which {name} does not "
                                    f"have (it has {sorted(labels)})")
        for metric, label, op, value in found["matchers"]:
            if metric is None or metric in allow or metric not in label_sets or \
                    label in TARGET_LABELS or label == "__name__":
                continue
            if label not in label_sets[metric]:
                problems.append(f"{where}: matches on '{label}', which {metric} does not have")
            elif op == "=" and value != "VAR" and value not in label_values[(metric, label)]:
                problems.append(f"{where}: {metric}{{{label}=\"{value}\"}} matches nothing "
                                f"kvgov exports (values: "
                                f"{sorted(label_values[(metric, label)])})")
        if SAVINGS in names:
            if "source" not in found["grouping"] or re.search(r"\bwithout\s*\([^)]*source",
                                                              expr):
                problems.append(f"{where}: {SAVINGS} must stay per source "
                                f"(sum by (source) ...), never summed across sources: {expr}")
            stacking = (((panel or {}).get("fieldConfig", {}).get("defaults", {})
                         .get("custom", {}).get("stacking", {})).get("mode", "none"))
            if stacking != "none":
                problems.append(f"{where}: savings must not be stacked (stacking.mode "
                                f"'{stacking}' draws a sum across sources)")
    return checked, problems


def main():
    binary, source_dir = sys.argv[1], sys.argv[2]
    dashboard_path = os.path.join(source_dir, "deploy", "grafana", "kvgov.json")
    rules_path = os.path.join(source_dir, "deploy", "prometheus", "kvgov-alerts.yml")
    with open(dashboard_path, encoding="utf-8") as f:
        dashboard = json.load(f)
    if not 36 <= dashboard.get("schemaVersion", 0) <= 39:
        raise TestFailure(f"{dashboard_path}: schemaVersion {dashboard.get('schemaVersion')}")
    ids = [p["id"] for p in dashboard["panels"]]
    if len(ids) != len(set(ids)):
        raise TestFailure(f"{dashboard_path}: repeated panel ids")

    with tempfile.TemporaryDirectory(prefix="kvgov-dashboard-test-") as tmp:
        engine = f"id=w1,kind=vllm,events=tcp://127.0.0.1:{free_port()},model=sim-model"
        with Kvgov(binary, tmp, ["--engine", engine]) as kvgov:
            populate(kvgov)
            status, text = http("GET", kvgov.url + "/metrics")
            if status != 200:
                raise TestFailure(f"GET /metrics: {status} {text}")
    types, samples = parse_exposition(text)
    exported = series_names(types)
    label_sets = {}
    label_values = {}
    for name, labels, _ in samples:
        label_sets.setdefault(name, set()).update(labels)
        for label, value in labels.items():
            label_values.setdefault((name, label), set()).add(value)

    panel_queries = dashboard_queries(dashboard)
    checked, problems = check(panel_queries, exported, label_sets, label_values)
    rules = [(where, expr, None) for where, expr in rule_queries(rules_path)]
    rules_checked, rule_problems = check(rules, exported, label_sets, label_values,
                                         allow={"up"})
    problems += rule_problems

    # The check itself must catch each kind of mistake, against this scrape.
    for bad in ('rate(kvgov_engine_event_total[5m])',                       # typo
                'histogram_quantile(0.9, rate(kvgov_route_latency_seconds[5m]))',  # bare histogram
                'sum by (tier) (rate(kvgov_engine_events_total[5m]))',     # label it lacks
                'kvgov_certificates_total{outcome="issue"}',               # value it lacks
                'sum(rate(kvgov_prefill_tokens_saved_total[5m]))',         # summed across sources
                'sum without (source) (kvgov_prefill_tokens_saved_total)',
                'vector(1)'):                                              # names no metric
        if not check([("self-check", bad, None)], exported, label_sets, label_values)[1]:
            problems.append(f"self-check: the check accepted {bad!r}")

    used = set()
    for _, expr, _ in panel_queries:
        used |= {exported.get(n) for n in analyze_promql(expr)["names"]}
    unused = sorted(set(types) - used)
    print(f"dashboard: {len(panel_queries)} queries, {checked} metric references checked "
          f"against {len(types)} families kvgov exports")
    print(f"alert rules: {len(rules)} expressions, {rules_checked} metric references checked")
    if unused:
        print(f"families not on the dashboard: {', '.join(unused)}")
    if problems:
        print(f"{len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run_main(main)
