/* The ring's seqlock in C11 atomics: how the writer publishes a bag into its slot and how a
 * reader copies one out whole. One copy of the memory ordering, shared by the C module
 * (_native.c) and by the stress test that runs it on arm64 (tests/ring_stress.c), so what
 * the test proves on a machine that reorders memory is what the module runs.
 *
 * The ordering (ring/writer.py and ring/reader.py argue it in words):
 *
 *   writer: seq = 2s-1 (relaxed); length, publish_ns, origin (relaxed); release fence;
 *           payload; seq = 2s (release); write_seq = s (release); futex word (release);
 *           full fence; then the sleepers line is loaded (the Dekker handshake, ring/wake.py)
 *   reader: v = seq (acquire); length, publish_ns, origin (relaxed); payload; acquire fence;
 *           seq again (relaxed): unchanged and v == 2s means the copy is whole
 *
 * the pattern of Boehm, "Can seqlocks get along with programming language memory models?"
 * (MSPC 2012). On x86-64 the fences and orders cost nothing but the compiler's freedom; on
 * arm64 they are the barriers (dmb, ldar, stlr) the bytes need. The payload is copied with
 * memcpy, racing the writer as every seqlock does: the second look at seq says whether the
 * copy may be used.
 */
#ifndef TATOLAB_RING_PROTOCOL_H
#define TATOLAB_RING_PROTOCOL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RING_SLOT_HEADER_Q 8 /* a slot: seq, length, publish_ns, origin_ns, origin, padding to 64 bytes, payload */

typedef _Atomic uint64_t ring_word64;
typedef _Atomic uint32_t ring_word32;

#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#ifndef RING_STREAM_MIN
#define RING_STREAM_MIN ((size_t)2 << 20)
#endif

/* A payload's copy into its slot. From RING_STREAM_MIN bytes on (more than a core's cache, 2 MiB
 * here, holds anyway) x86-64 writes it with non-temporal stores: they skip reading every line of
 * the slot in before writing it. Measured here (bench/big_bags.py's machine, a writer asleep
 * between bags as at 100 Hz): 8 MiB 1,389 -> 1,009 us, 2 MiB 210 -> 156 us; a reader on another
 * core then reads the whole bag from memory, ~50 us slower at 8 MiB; at 1 MiB the two even out,
 * so smaller bags keep memcpy. The sfence orders the streamed bytes before the stores after. */
static inline void ring_copy_payload(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
    if (n >= RING_STREAM_MIN && ((uintptr_t)dst & 15) == 0) {
        char *d = (char *)dst;
        const char *s = (const char *)src;
        size_t i = 0;
        for (; i + 64 <= n; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
            _mm_stream_si128((__m128i *)(d + i), a);
            _mm_stream_si128((__m128i *)(d + i + 16), b);
            _mm_stream_si128((__m128i *)(d + i + 32), c);
            _mm_stream_si128((__m128i *)(d + i + 48), e);
        }
        _mm_sfence();
        memcpy(d + i, s + i, n - i);
        return;
    }
#endif
    memcpy(dst, src, n);
}

/* Publish bag `s` (`n` bytes) into the slot whose header is `h`, with its origin (when and
 * which output it comes from: ../latency.py) beside it, never in the bag. */
static inline void ring_publish_slot(uint64_t *h, uint64_t s, const void *data, size_t n, uint64_t publish_ns,
                                     uint64_t origin_ns, uint64_t origin) {
    ring_word64 *w = (ring_word64 *)h;
    atomic_store_explicit(&w[0], 2 * s - 1, memory_order_relaxed);
    atomic_store_explicit(&w[1], (uint64_t)n, memory_order_relaxed);
    atomic_store_explicit(&w[2], publish_ns, memory_order_relaxed);
    atomic_store_explicit(&w[3], origin_ns, memory_order_relaxed);
    atomic_store_explicit(&w[4], origin, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* the odd word before any payload byte */
    ring_copy_payload(h + RING_SLOT_HEADER_Q, data, n);
    atomic_store_explicit(&w[0], 2 * s, memory_order_release); /* every payload byte before the even word */
}

/* A loan (ring/writer.py's RingWriter.loan): the slot `h` taken for bag `s`, its payload written
 * in place by the caller between ring_open_slot and ring_seal_slot. Readers of the bag the slot
 * held see it gone (odd word) before any payload byte changes. */
static inline void ring_open_slot(uint64_t *h, uint64_t s) {
    atomic_store_explicit((ring_word64 *)h, 2 * s - 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst); /* the odd word before any payload byte (and, for
                                                  the caller's view of holds, before its loads) */
}

static inline void ring_seal_slot(uint64_t *h, uint64_t s, size_t n, uint64_t publish_ns, uint64_t origin_ns,
                                  uint64_t origin) {
    ring_word64 *w = (ring_word64 *)h;
    atomic_store_explicit(&w[1], (uint64_t)n, memory_order_relaxed);
    atomic_store_explicit(&w[2], publish_ns, memory_order_relaxed);
    atomic_store_explicit(&w[3], origin_ns, memory_order_relaxed);
    atomic_store_explicit(&w[4], origin, memory_order_relaxed);
    atomic_store_explicit(&w[0], 2 * s, memory_order_release); /* every payload byte and word before the even word */
}

/* Tell readers bag `s` is there: the header's write_seq, then the futex word they sleep on;
 * then a full fence, so the word is visible before the caller loads the sleepers line. */
static inline void ring_announce(uint64_t *write_seq, uint32_t *futex_word, uint64_t s, uint32_t word_value) {
    atomic_store_explicit((ring_word64 *)write_seq, s, memory_order_release);
    atomic_store_explicit((ring_word32 *)futex_word, word_value, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
}

/* A reader's first look at the slot `h` for bag `s`: its seq word (nonzero) when the slot
 * holds bag s and its length fits `slot_size`, with the length and publish_ns; 0 otherwise. */
static inline uint64_t ring_slot_open(const uint64_t *h, uint64_t s, uint64_t slot_size, uint64_t *n,
                                      uint64_t *publish_ns) {
    ring_word64 *w = (ring_word64 *)h;
    uint64_t v = atomic_load_explicit(&w[0], memory_order_acquire);
    if (v != 2 * s)
        return 0;
    *n = atomic_load_explicit(&w[1], memory_order_relaxed);
    *publish_ns = atomic_load_explicit(&w[2], memory_order_relaxed);
    return *n > slot_size ? 0 : v;
}

/* The origin words of the slot `h`, read between ring_slot_open and ring_slot_still (so they
 * are used only when the copy proves whole). */
static inline void ring_slot_origin(const uint64_t *h, uint64_t *origin_ns, uint64_t *origin) {
    ring_word64 *w = (ring_word64 *)h;
    *origin_ns = atomic_load_explicit(&w[3], memory_order_relaxed);
    *origin = atomic_load_explicit(&w[4], memory_order_relaxed);
}

/* After copying the payload: 1 when the slot still holds what ring_slot_open saw (the copy is
 * whole), 0 when the writer lapped it meanwhile. */
static inline int ring_slot_still(const uint64_t *h, uint64_t v) {
    atomic_thread_fence(memory_order_acquire); /* the copy before the second look at the word */
    return atomic_load_explicit((ring_word64 *)h, memory_order_relaxed) == v;
}

static inline uint64_t ring_load_acquire(const uint64_t *word) {
    return atomic_load_explicit((ring_word64 *)word, memory_order_acquire);
}

#endif
