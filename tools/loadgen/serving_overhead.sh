#!/bin/bash
# Serving path vs engine (issue 15), measured in one run on one machine:
#
#   server: //server:moeserve on MODEL with --threads=N, driven by
#           moeserve_loadgen at concurrency 1 with prompts of PROMPT_LEN
#           token ids (--prompt_tokens) and DECODE_TOKENS new tokens each
#           (greedy, ignore_eos): TTFT p50 (the prompt's prefill, through
#           gRPC) and TPOT p50 (ms per decoded token, client clock);
#   engine: moeserve_bench's roofline mode on the same model and threads,
#           --prompt_len=PROMPT_LEN, prefill batch 1 and decode batch 1 over
#           DECODE_TOKENS steps (MoeModel::Forward alone: no scheduler,
#           sampling, detokenisation or gRPC);
#
# then prints server/engine ratios: decode speed engine_ms / server_ms
# (goal >= 0.9) and TTFT / engine prefill time (goal <= 1.05). Decode
# contexts match (PROMPT_LEN .. PROMPT_LEN + DECODE_TOKENS on both sides).
#
# The machine is shared (a VM: its speed drifts by 10-30% over tens of
# seconds), so only figures taken close together are compared. The server
# starts once and stays up; each of the K rounds (--rounds=K) runs the engine
# bench, then REQUESTS requests through the server, then the engine bench
# again, and pairs the server's figures with the mean of the two engine runs
# around them. The median round's ratios are reported, and also the ratio of
# the medians of each column.
#
# Usage (from the workspace root):
#   tools/loadgen/serving_overhead.sh [--threads=2] [--model_dir=models/demo]
#       [--prompt_len=512] [--decode_tokens=128] [--requests=16]
#       [--rounds=1] [--no_build] [--json_out=FILE]
# Builds //server:moeserve, //tools/loadgen:moeserve_loadgen and
# //tools/bench:moeserve_bench with --config=opt first (unless --no_build);
# B=... overrides the binaries' directory (default bazel-out/k8-optopt/bin).
set -euo pipefail

threads=2
model_dir=models/demo
prompt_len=512
decode_tokens=128
requests=16
rounds=1
build=1
json_out=""
for arg in "$@"; do
  case "$arg" in
    --threads=*) threads="${arg#*=}" ;;
    --model_dir=*) model_dir="${arg#*=}" ;;
    --prompt_len=*) prompt_len="${arg#*=}" ;;
    --decode_tokens=*) decode_tokens="${arg#*=}" ;;
    --requests=*) requests="${arg#*=}" ;;
    --rounds=*) rounds="${arg#*=}" ;;
    --no_build) build=0 ;;
    --json_out=*) json_out="${arg#*=}" ;;
    *) echo "serving_overhead.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

if [[ "$build" == 1 ]]; then
  bazel build --config=opt //server:moeserve \
    //tools/loadgen:moeserve_loadgen //tools/bench:moeserve_bench
fi
B="${B:-bazel-out/k8-optopt/bin}"
tmp="$(mktemp -d /tmp/serving_overhead.XXXXXX)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Engine alone: prints "prefill_ms decode_ms_per_token".
run_engine() {
  local json="$tmp/bench.json"
  "$B/tools/bench/moeserve_bench" --model_dir="$model_dir" \
    --gen_qwen_layers=0 --threads="$threads" --prompt_len="$prompt_len" \
    --prefill_batch_sizes=1 --batch_sizes=1 --decode_steps="$decode_tokens" \
    --bandwidth_mib=256 --bandwidth_repeats=1 --json_out="$json" \
    >"$tmp/bench.log" 2>&1 || { cat "$tmp/bench.log" >&2; return 1; }
  jq -r --argjson len "$prompt_len" '
    .models[0].results as $r
    | ($r[] | select(.phase == "prefill" and .batch == 1) | .tokens_per_s)
        as $p
    | ($r[] | select(.phase == "decode" and .batch == 1) | .tokens_per_s)
        as $d
    | "\(1000 * $len / $p) \(1000 / $d)"' "$json"
}

# Starts the server in the background and sets server_pid / server_port.
start_server() {
  "$B/server/moeserve" --model_dir="$model_dir" --threads="$threads" \
    --port=0 --metrics_port=0 >"$tmp/server.log" 2>&1 &
  server_pid=$!
  server_port=""
  for _ in $(seq 1 600); do
    server_port="$(sed -n 's/.*gRPC listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' \
      "$tmp/server.log" | head -n1)"
    [[ -n "$server_port" ]] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/server.log" >&2; return 1; }
    sleep 0.1
  done
  [[ -n "$server_port" ]] || { cat "$tmp/server.log" >&2; return 1; }
}

# loadgen c=1 against the running server: prints "ttft_p50_ms tpot_p50_ms".
# WARMUP requests first (untimed).
run_load() {
  local warmup="$1"
  "$B/tools/loadgen/moeserve_loadgen" --target="127.0.0.1:$server_port" \
    --wait_ready_seconds=120 --concurrency=1 --requests_per_level="$requests" \
    --prompt_tokens="$prompt_len" --max_new_tokens="$decode_tokens" \
    --warmup_requests="$warmup" --json_out="$tmp/loadgen.json" \
    >"$tmp/loadgen.log" 2>&1 || { cat "$tmp/loadgen.log" >&2; return 1; }
  jq -r '.levels[0] | "\(.ttft_p50_ms) \(.tpot_p50_ms)"' "$tmp/loadgen.json"
}

cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
echo "machine: ${cpu:-unknown}, $(nproc) logical CPUs; load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $model_dir, threads $threads, prompt $prompt_len token ids," \
  "$decode_tokens decoded tokens, loadgen c=1 x $requests requests per round"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "$(git diff --quiet 2>/dev/null || echo '(uncommitted changes)')"
echo
printf '%-6s %12s %12s %12s %12s %12s %12s\n' round engine_pf_ms \
  server_ttft engine_ms/tok server_ms/tok decode_ratio ttft_ratio
rows=()
start_server
for round in $(seq 1 "$rounds"); do
  engine_before="$(run_engine)"
  # The first round also warms the server up (2 requests, untimed).
  server="$(run_load "$([[ "$round" == 1 ]] && echo 2 || echo 0)")"
  engine_after="$(run_engine)"
  read -r pf_before dec_before <<<"$engine_before"
  read -r pf_after dec_after <<<"$engine_after"
  read -r ttft tpot <<<"$server"
  row="$(jq -n --argjson round "$round" \
    --argjson pf0 "$pf_before" --argjson pf1 "$pf_after" \
    --argjson dec0 "$dec_before" --argjson dec1 "$dec_after" \
    --argjson ttft "$ttft" --argjson tpot "$tpot" '
    (($pf0 + $pf1) / 2) as $pf | (($dec0 + $dec1) / 2) as $dec
    | {round: $round, engine_prefill_ms: $pf, server_ttft_ms: $ttft,
       engine_decode_ms_per_token: $dec, server_tpot_ms: $tpot,
       engine_prefill_ms_before_after: [$pf0, $pf1],
       engine_decode_ms_per_token_before_after: [$dec0, $dec1],
       decode_ratio: ($dec / $tpot), ttft_ratio: ($ttft / $pf)}')"
  jq -r '[.round, .engine_prefill_ms, .server_ttft_ms,
          .engine_decode_ms_per_token, .server_tpot_ms, .decode_ratio,
          .ttft_ratio] | @tsv' <<<"$row" |
    while IFS=$'\t' read -r r a b c d e f; do
      printf '%-6s %12.2f %12.2f %12.4f %12.4f %12.3f %12.3f\n' \
        "$r" "$a" "$b" "$c" "$d" "$e" "$f"
    done
  rows+=("$row")
done
summary="$(printf '%s\n' "${rows[@]}" | jq -s \
  --argjson threads "$threads" --arg model "$model_dir" \
  --argjson prompt_len "$prompt_len" --argjson decode "$decode_tokens" '
  def median: sort | .[(length - 1) / 2 | floor];
  {model: $model, threads: $threads, prompt_len: $prompt_len,
   decode_tokens: $decode, rounds: .,
   decode_ratio: (map(.decode_ratio) | median),
   ttft_ratio: (map(.ttft_ratio) | median),
   decode_ratio_of_medians: ((map(.engine_decode_ms_per_token) | median) /
                             (map(.server_tpot_ms) | median)),
   ttft_ratio_of_medians: ((map(.server_ttft_ms) | median) /
                           (map(.engine_prefill_ms) | median))}')"
echo
jq -r '"server/engine decode speed (engine ms/token / server TPOT): " +
  "\(.decode_ratio * 1000 | round / 1000) (goal >= 0.9)\n" +
  "server TTFT / engine prefill (\(.prompt_len) tokens): " +
  "\(.ttft_ratio * 1000 | round / 1000) (goal <= 1.05)" +
  (if (.rounds | length) > 1 then
     "\n(median of \(.rounds | length) rounds; ratio of the column " +
     "medians: decode \(.decode_ratio_of_medians * 1000 | round / 1000), " +
     "TTFT \(.ttft_ratio_of_medians * 1000 | round / 1000))"
   else "" end)' <<<"$summary"
if [[ -n "$json_out" ]]; then echo "$summary" >"$json_out"; fi
