#!/usr/bin/python3
"""Checks deploy/grafana/moeserve-dashboard.json against a live Prometheus
that scrapes a live moeserve (dashboard_query_test.sh starts both):

- the dashboard's shape (unique panel ids, the ${datasource} of every panel
  and target, unique refIds, the template variables);
- the variables' label_values() queries return the job and exactly the
  engines of the server's engines.json;
- every panel target's `expr`, with the Grafana variables substituted (once
  with "All", once with the values the variables found), returns >= 1
  series through Prometheus's HTTP API;
- every rule of deploy/prometheus/moeserve.rules.yml (loaded in that
  Prometheus) is healthy, every recorded series exists, and a few have sane
  values for both engines after the traffic.

Args: <prometheus port> <dashboard.json> <engines.json> <drafting engine>
      <moeserve.rules.yml>
"""
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request

port, dashboard_file, engines_file, drafter_engine, rules_file = sys.argv[1:6]
BASE = f"http://127.0.0.1:{port}/api/v1"
# Grafana's built-in variables, for a 1 s scrape interval.
BUILTINS = {"__rate_interval": "5s", "__interval": "1s", "__range": "1m",
            "__range_s": "60", "__interval_ms": "1000"}

failures = []
value_checks = [0, 0]  # checks past the target queries: passed, failed


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr)


def api(path, **params):
    url = f"{BASE}/{path}?" + urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = json.load(reply)
    if body.get("status") != "success":
        raise ValueError(f"{path} {params}: {body}")
    return body["data"]


def query(expr):
    data = api("query", query=expr)
    assert data["resultType"] == "vector", data["resultType"]
    return data["result"]


with open(dashboard_file) as f:
    dash = json.load(f)
with open(engines_file) as f:
    engines = sorted(e["name"] for e in json.load(f)["engines"])

# ---- shape
ids = [p.get("id") for p in dash["panels"]]
if len(ids) != len(set(ids)) or None in ids:
    fail(f"panel ids not unique: {ids}")
variables = {v["name"]: v for v in dash["templating"]["list"]}
for name in ("datasource", "job", "engine"):
    if name not in variables:
        fail(f"no template variable {name}")
if variables.get("datasource", {}).get("query") != "prometheus":
    fail("the datasource variable is not of type prometheus")
targets = []  # (panel title, refId, expr)
for p in dash["panels"]:
    if p["type"] == "row":
        continue
    if p.get("datasource", {}).get("uid") != "${datasource}":
        fail(f"panel {p['title']!r}: datasource is not ${{datasource}}")
    if not p.get("targets"):
        fail(f"panel {p['title']!r}: no targets")
    refs = [t.get("refId") for t in p.get("targets", [])]
    if len(refs) != len(set(refs)):
        fail(f"panel {p['title']!r}: refIds not unique: {refs}")
    for t in p.get("targets", []):
        if t.get("datasource", {}).get("uid") != "${datasource}":
            fail(f"panel {p['title']!r} {t.get('refId')}: datasource is not ${{datasource}}")
        if not t.get("expr", "").strip():
            fail(f"panel {p['title']!r} {t.get('refId')}: empty expr")
        else:
            targets.append((p["title"], t["refId"], t["expr"]))


def substitute(text, values):
    def var(name):
        if name in BUILTINS:
            return BUILTINS[name]
        if name not in values:
            raise KeyError(f"unknown variable ${name} in {text!r}")
        return values[name]
    text = re.sub(r"\$\{(\w+)(?::\w+)?\}", lambda m: var(m.group(1)), text)
    text = re.sub(r"\[\[(\w+)\]\]", lambda m: var(m.group(1)), text)
    text = re.sub(r"\$(\w+)", lambda m: var(m.group(1)), text)
    return text


def label_values(definition, values):
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", definition.strip(), re.S)
    if not m:
        raise ValueError(f"not a label_values() query: {definition!r}")
    match, label = substitute(m.group(1), values), m.group(2)
    series = api("series", **{"match[]": match,
                              "start": time.time() - 600, "end": time.time()})
    return sorted({s[label] for s in series if label in s})


def regex_of(vals):  # Grafana's formatting of a multi-value for Prometheus
    return "(" + "|".join(re.escape(v) for v in vals) + ")" if vals else ""


# ---- wait for Prometheus to have scraped and evaluated the rules, then
# evaluate the variables as Grafana would (job first, engine depends on it).
deadline = time.time() + 60
chosen = {}
while True:
    try:
        jobs = label_values(variables["job"]["definition"], {})
        chosen = {"job": regex_of(jobs)}
        found = label_values(variables["engine"]["definition"], chosen)
        chosen["engine"] = regex_of(found)
        if jobs == ["moeserve"] and found == engines:
            break
        why = f"job {jobs}, engines {found}"
    except (OSError, ValueError) as e:
        why = repr(e)
    if time.time() > deadline:
        fail(f"template variables: want job ['moeserve'] and engines {engines}, got {why}")
        chosen = {"job": "moeserve", "engine": regex_of(engines)}
        break
    time.sleep(0.5)

scenarios = {"All": {"job": variables["job"].get("allValue", ".*"),
                     "engine": variables["engine"].get("allValue", ".*")},
             "chosen": chosen}

# ---- every target returns series (poll: recorded series need an evaluation)
pending = {}
for title, ref, expr in targets:
    for scenario, values in scenarios.items():
        try:
            pending[(title, ref, scenario)] = substitute(expr, values)
        except KeyError as e:
            fail(f"panel {title!r} {ref}: {e}")
results = {}
deadline = time.time() + 45
while pending and time.time() < deadline:
    for key, expr in list(pending.items()):
        try:
            got = query(expr)
        except (OSError, ValueError) as e:
            results[key] = repr(e)
            continue
        results[key] = got
        if got:
            del pending[key]
    if pending:
        time.sleep(0.5)
for (title, ref, scenario), expr in pending.items():
    fail(f"panel {title!r} target {ref} ({scenario}) returned no series: "
         f"{expr!r} -> {results.get((title, ref, scenario))!r}")
checked = len(targets) * len(scenarios)
print(f"dashboard: {checked - len(pending)}/{checked} target queries "
      f"({len(targets)} targets x {len(scenarios)} variable selections) "
      f"returned series")


# ---- recorded series: values that the traffic must have produced
def values_by_policy(expr):
    return {s["metric"].get("policy"): float(s["value"][1]) for s in query(expr)}


def expect(expr, ok, what):
    deadline = time.time() + 30
    while True:
        got = values_by_policy(expr)
        if ok(got):
            print(f"ok: {what}: {got}")
            value_checks[0] += 1
            return
        if time.time() > deadline:
            fail(f"{what}: {expr} -> {got}")
            value_checks[1] += 1
            return
        time.sleep(0.5)


def finite(v):
    return v is not None and math.isfinite(v)


# Every rule of the rules file evaluates without error on live data, and
# every recorded series (but the refusals', which need a refused call)
# exists: the rules use the names and labels the server exports.
def rules_health():
    groups = api("rules")["groups"]
    return {r["name"]: (r["health"], r.get("lastError", ""), r["type"])
            for g in groups for r in g["rules"]}


with open(rules_file) as f:
    recorded = re.findall(r"^\s*- record:\s*(\S+)", f.read(), re.M)
deadline = time.time() + 30
while True:
    health = rules_health()
    bad = {n: h for n, h in health.items() if h[0] != "ok"}
    missing = [r for r in recorded
               if "resource_exhausted" not in r and not query(r)]
    if not bad and not missing and len(health) >= len(recorded):
        print(f"ok: {len(health)} rules healthy, {len(recorded)} recorded "
              f"series present (but the refusals')")
        value_checks[0] += 1
        break
    if time.time() > deadline:
        fail(f"rules: unhealthy {bad}, recorded series missing {missing}")
        value_checks[1] += 1
        break
    time.sleep(0.5)

sel = '{job="moeserve"}'
expect(f"job_policy:moeserve_expert_hit_ratio:rate5m{sel}",
       lambda g: sorted(g) == engines and all(finite(v) and 0 <= v <= 1 for v in g.values()),
       "hit rate of every engine in [0, 1]")
expect(f"job_policy:moeserve_link_gbps:rate5m{sel}",
       lambda g: sorted(g) == engines and all(finite(v) and v > 0 for v in g.values()),
       "link GB/s of every engine > 0 (misses loaded experts)")
expect(f"job_policy:moeserve_spec_decode_acceptance_ratio:rate5m{sel}",
       lambda g: finite(g.get(drafter_engine)) and 0 <= g[drafter_engine] <= 1 and
       all(not finite(v) for p, v in g.items() if p != drafter_engine),
       f"acceptance rate of {drafter_engine} in [0, 1], NaN for engines that do not draft")
expect(f"job_policy:moeserve_spec_decode_tokens_per_verification:rate5m{sel}",
       lambda g: finite(g.get(drafter_engine)) and g[drafter_engine] >= 1,
       f"tokens per verification of {drafter_engine} >= 1")
expect(f"job_policy:moeserve_time_to_first_token_seconds:p99_5m{sel}",
       lambda g: sorted(g) == engines and all(finite(v) and v > 0 for v in g.values()),
       "TTFT p99 of every engine > 0")

print(f"dashboard: {checked - len(pending) + value_checks[0]} passed, "
      f"{len(pending) + value_checks[1]} failed")
sys.exit(1 if failures else 0)
