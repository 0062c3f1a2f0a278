// Bulk copies for the collectives: what std::memcpy does, without its `rep movsb` path.
//
// Note [Copies without rep movsb]: glibc's memcpy copies blocks above a few KiB with `rep movsb`
// on CPUs that advertise fast string moves (ERMS/FSRM). On the AMD EPYC virtual machines this
// project is measured on that instruction is several times slower than plain vector loads and
// stores for the copies the shared-memory collectives make (into and out of the window's slots,
// between ranks' buffers): a 2-rank 128 KiB allreduce on private buffers took 32 us with it and
// 9.7 us without (GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold raised past the size), and
// the whole staged path ran 2-6x slower from 128 KiB up. copy() moves 128 bytes per iteration
// with AVX2 (or SSE2) loads and stores where the CPU has them, and leaves small copies, whose
// cost is the call, to memcpy.
#pragma once

#include <cstddef>

namespace cohort::kernels {

// dst[0, bytes) = src[0, bytes); the ranges must not overlap (as std::memcpy).
void copy(void* dst, const void* src, size_t bytes);

namespace detail {
// The same without AVX2 (SSE2 loads and stores), for tests on CPUs that have AVX2.
void copy_without_avx2(void* dst, const void* src, size_t bytes);
}  // namespace detail

}  // namespace cohort::kernels
