/* A stress test of the ring's seqlock (tatolab/_links/ring_protocol.h, what _native.c runs):
 * one writer thread publishes bags of varying length into a small ring as fast as it can (every
 * other one made in its slot, as a loan is);
 * reader threads copy them out the way read_run does and check every bag they accept. A bag
 * whose sequence number, length or checksum is wrong is a torn read the seqlock let through:
 * the run fails. tests/test_ring_arm64.py builds it natively and for arm64 (run under
 * qemu-aarch64), since x86-64 keeps stores in order by itself and would hide a missing barrier.
 *
 *     ring_stress [bags] [readers]     exits 0 and prints one line of counts when every bag read was whole
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#define RING_STREAM_MIN 256 /* half the bags take the streamed copy that big bags take (x86-64) */
#include "../tatolab/_links/ring_protocol.h"

#define SLOTS 8
#define SLOT_SIZE 512
#define STRIDE_Q (RING_SLOT_HEADER_Q + SLOT_SIZE / 8)
#define MAX_READERS 8

static uint64_t ring[SLOTS * STRIDE_Q] __attribute__((aligned(64)));
static uint64_t write_seq __attribute__((aligned(64)));
static uint32_t futex_word;
static uint64_t bags;

static uint64_t checksum(const unsigned char *p, size_t n) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static size_t length_of(uint64_t s) { return 16 + (size_t)((s * 7919u) % (SLOT_SIZE - 16 + 1)); }

/* bag s: its number, bytes that depend on it, and the checksum of all before it */
static void make_bag(uint64_t s, unsigned char *out, size_t n) {
    memcpy(out, &s, 8);
    for (size_t i = 8; i < n - 8; i++)
        out[i] = (unsigned char)(s * 31u + i * 17u);
    uint64_t sum = checksum(out, n - 8);
    memcpy(out + n - 8, &sum, 8);
}

static void *writer(void *unused) {
    unsigned char bag[SLOT_SIZE];
    for (uint64_t s = 1; s <= bags; s++) {
        size_t n = length_of(s);
        uint64_t *h = ring + ((s - 1) % SLOTS) * STRIDE_Q;
        if (s % 2) { /* a loan (RingWriter.loan): the bag made in the slot itself */
            ring_open_slot(h, s);
            make_bag(s, (unsigned char *)(h + RING_SLOT_HEADER_Q), n);
            ring_seal_slot(h, s, n, s, s, 0);
        } else {
            make_bag(s, bag, n);
            ring_publish_slot(h, s, bag, n, s, s, 0);
        }
        ring_announce(&write_seq, &futex_word, s, (uint32_t)(s & 0x7FFFFFFFu));
        if (s % SLOTS == 0)
            sched_yield(); /* let the readers in now and then: most bags are read, some torn */
    }
    return unused;
}

struct counts {
    uint64_t read, lapped, torn, bad;
};

static void *reader(void *arg) {
    struct counts *c = arg;
    unsigned char copy[SLOT_SIZE];
    uint64_t next = 1;
    while (next <= bags) {
        uint64_t ws = ring_load_acquire(&write_seq);
        if (next > ws) {
            sched_yield();
            continue;
        }
        if (ws >= SLOTS && next < ws - SLOTS + 1)
            next = ws - SLOTS + 1; /* lapped: skip to the oldest bag still there */
        const uint64_t *h = ring + ((next - 1) % SLOTS) * STRIDE_Q;
        uint64_t n, ts;
        uint64_t v = ring_slot_open(h, next, SLOT_SIZE, &n, &ts);
        if (v == 0) {
            c->lapped++; /* the writer is on this slot again: look at write_seq anew */
            continue;
        }
        memcpy(copy, h + RING_SLOT_HEADER_Q, (size_t)n);
        if (!ring_slot_still(h, v)) {
            c->torn++; /* lapped during the copy: the seqlock caught it */
            continue;
        }
        uint64_t seq, sum;
        memcpy(&seq, copy, 8);
        memcpy(&sum, copy + n - 8, 8);
        if (seq != next || n != length_of(next) || ts != next || sum != checksum(copy, n - 8)) {
            c->bad++;
            fprintf(stderr, "bag %llu read torn: seq %llu, %llu bytes (expected %zu)\n", (unsigned long long)next,
                    (unsigned long long)seq, (unsigned long long)n, length_of(next));
        }
        c->read++;
        next++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    bags = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
    int readers = argc > 2 ? atoi(argv[2]) : 3;
    if (readers < 1 || readers > MAX_READERS || bags < 1) {
        fprintf(stderr, "usage: ring_stress [bags] [readers 1..%d]\n", MAX_READERS);
        return 2;
    }
    pthread_t threads[MAX_READERS + 1];
    struct counts counts[MAX_READERS] = {{0}};
    for (int i = 0; i < readers; i++)
        pthread_create(&threads[i + 1], NULL, reader, &counts[i]);
    pthread_create(&threads[0], NULL, writer, NULL);
    for (int i = 0; i <= readers; i++)
        pthread_join(threads[i], NULL);
    struct counts total = {0};
    for (int i = 0; i < readers; i++) {
        total.read += counts[i].read;
        total.lapped += counts[i].lapped;
        total.torn += counts[i].torn;
        total.bad += counts[i].bad;
    }
    printf("bags %llu readers %d read %llu lapped %llu torn %llu bad %llu\n", (unsigned long long)bags, readers,
           (unsigned long long)total.read, (unsigned long long)total.lapped, (unsigned long long)total.torn,
           (unsigned long long)total.bad);
    return total.bad == 0 && total.read > 0 ? 0 : 1;
}
