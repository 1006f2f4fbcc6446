#!/usr/bin/env bash
# Print the CMAKE_ARGS that build llama.cpp (through llama-cpp-python) for the CPU of this machine.
#
# Why not llama.cpp's default GGML_NATIVE=ON: on Intel CPUs with AMX it compiles in the AMX extra buffer
# type, which segfaults in ggml_backend_amx_mul_mat on the first decode (see docs/install.md, "AMX CPUs"). So we build
# without AMX and switch on, one by one, the x86 extensions /proc/cpuinfo says this CPU has. Extensions the
# CPU lacks stay off, so the build never emits an instruction that would fault here.
# Non-x86 or non-Linux machines get llama.cpp's own defaults (Metal on macOS, NEON on ARM).
# LOCALSPEC_GPU picks the GPU backend built beside the CPU one: cuda, metal, vulkan, or cpu (none); unset: metal
# on macOS (llama.cpp's own default there), else cpu. Extra flags can be appended through LOCALSPEC_CMAKE_EXTRA.
set -eu
gpu="${LOCALSPEC_GPU:-}"
if [ -z "$gpu" ]; then
  if [ "$(uname -s)" = Darwin ]; then gpu=metal; else gpu=cpu; fi
fi
case "$gpu" in
  cuda) gpu_args="-DGGML_CUDA=ON" ;;
  metal) gpu_args="-DGGML_METAL=ON" ;;
  vulkan) gpu_args="-DGGML_VULKAN=ON" ;;
  cpu) if [ "$(uname -s)" = Darwin ]; then gpu_args="-DGGML_METAL=OFF"; else gpu_args=""; fi ;;
  *) echo "llama_cmake_args.sh: GPU must be cuda, metal, vulkan or cpu, got '$gpu'" >&2; exit 2 ;;
esac
args=""
if [ "$(uname -s)" = Linux ] && [ -r /proc/cpuinfo ] && grep -qw avx /proc/cpuinfo; then
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  has() { case "$flags" in *" $1 "*) return 0;; *) return 1;; esac; }
  args="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  on() { if has "$1"; then args="$args -D$2=ON"; else args="$args -D$2=OFF"; fi; }
  on avx GGML_AVX
  on avx2 GGML_AVX2
  on fma GGML_FMA
  on f16c GGML_F16C
  on bmi2 GGML_BMI2
  on avx_vnni GGML_AVX_VNNI
  on avx512f GGML_AVX512
  on avx512vbmi GGML_AVX512_VBMI
  on avx512_vnni GGML_AVX512_VNNI
  on avx512_bf16 GGML_AVX512_BF16
fi
echo "$args $gpu_args ${LOCALSPEC_CMAKE_EXTRA:-}"
