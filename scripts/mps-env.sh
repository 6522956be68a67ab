# Sourced by scripts that run 2 ranks on one GPU: an MPS daemon makes the
# ranks share its SMs (without it they take turns in time slices of
# milliseconds, which is all a protocol latency then measures).
#
#   . scripts/mps-env.sh && mps_start DIR
#
# mps_start DIR exports the daemon's pipe and log folders (under DIR),
# HIR_SHARE_GPUS=1 and CUDA_DEVICE_MAX_CONNECTIONS=32 (with MPS's default,
# a client's streams share a few hardware queues, and a stream blocked on a
# semaphore wait held up another one that would have released it: an ipc
# protocol test deadlocked), then starts the daemon and sets an EXIT trap
# that stops it and removes DIR; it returns 1, saying why, when it cannot
# (and sets no trap). mps_stop asks the daemon to quit at once; the EXIT
# trap then only removes DIR. More than 2 clients
# need fewer connections each: on an H100, 4 clients of 32 failed at their
# first launch with "out of memory", and 4 of 8 ran the ipc suites
# (gpu-check.sh --shared-np sets 8 above 2 ranks).
mps_start() {
  command -v nvidia-cuda-mps-control >/dev/null ||
    { echo "mps-env: no nvidia-cuda-mps-control on this machine" >&2; return 1; }
  export CUDA_MPS_PIPE_DIRECTORY=$1/mps-pipe CUDA_MPS_LOG_DIRECTORY=$1/mps-log
  export HIR_SHARE_GPUS=1 CUDA_DEVICE_MAX_CONNECTIONS=32
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY" || return 1
  nvidia-cuda-mps-control -d || { echo "mps-env: the MPS daemon did not start" >&2; return 1; }
  mps_dir_=$1
  trap 'mps_stop; rm -rf "$mps_dir_"' EXIT
}
mps_stop() {
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true
  if [ -n "${mps_dir_:-}" ]; then trap 'rm -rf "$mps_dir_"' EXIT; fi
}
