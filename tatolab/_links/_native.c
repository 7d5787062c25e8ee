/* The links' hot paths in C: the check a bag passes before it is written (the fast walk
 * of tatolab/_bags.py), the ring writer's publish of one bag into a mapped ring generation,
 * a reader's copy of a run of whole bags out of one, and the compare-and-swap readers
 * claim the watcher's role with.
 *
 * ring/ holds the protocol (layout, growth, moves, readers) and a pure-Python publish
 * that does exactly what `Publisher.write` does here; this module exists because the
 * interpreter spends ~1 us on the dozen stores, the copy, the clock read, the barrier and
 * the sleepers check that C does in ~60 ns (bench/write_cost.py, bench/links.py --write).
 * When it is not built (no compiler at install time, Python < 3.11, another ABI) ring/writer.py
 * uses its Python publish; both write the same bytes.
 *
 * Thread safety comes from the GIL: `write` never releases it, so a write is atomic to
 * the other threads of the process. Anything slower (a bag that needs a bigger ring, a
 * move, closing) runs in Python under the writer's lock after calling `gate()`, which
 * sends every other thread's writes to the slow callback (and so to that lock) until
 * `open()` lets them through again.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ring_protocol.h" /* the seqlock's stores and loads, in C11 atomics */
#include "_latency.h"
#include "_timing.h"

/* Offsets shared with ring/layout.py (checked there against this module's LAYOUT). */
#define WRITE_SEQ_Q 5
#define FUTEX_OFF 128
#define SLEEPERS_OFF 192
#define SLEEPERS_Q 8
#define WORD_MASK 0x7FFFFFFFu
#define TABLE_Q 32     /* the reader table (256 bytes in), records of RECORD_Q words */
#define RECORD_Q 8
#define R_ACTIVE 4     /* a record's words: active (2: an ordered reader), next bag to read */
#define R_NEXT 5
#define ACTIVE_ORDERED 2
#define HELD_OFF 40    /* bytes into a slot's header: the u32 count of views held (ring/views.py) */
#define WATCH_OFF 4352 /* the watcher (u32: its reader index + 1), then the hand-off word (ring/wake.py) */
#define HANDOFF_OFF 4356
#define FOLLOWERS_OFF 4416 /* byte i: reader i may sleep on the hand-off word */

typedef struct {
    PyObject_HEAD
    Py_buffer view;      /* the generation's mmap, held while attached */
    int attached;
    uint64_t *q;         /* the file as u64 words */
    uint32_t *word;      /* the futex word */
    const uint64_t *sleepers;
    Py_ssize_t slots_q;  /* first slot's header, in u64 words */
    Py_ssize_t stride_q; /* one slot, in u64 words */
    Py_ssize_t count;
    Py_ssize_t slot_size;
    Py_ssize_t next_index; /* the slot the next bag goes to */
    uint64_t seq;          /* the last bag published */
    uint64_t wakes;        /* FUTEX_WAKE calls made (a reader may have been asleep) */
    Py_ssize_t fits;       /* bags up to this size take the fast path; -1: none do */
    int gated;             /* gate() until open(): every bag to the slow callback (also while a loan is open) */
    /* A generation grown for big bags (set_grown): bags over big_from bytes, up to slot_size, take the
     * fast path too, unless a view of the next slot is held or (while it may widen) an ordered reader
     * is within a bag of being lapped; the slow path moves the ring then (ring/writer.py). */
    Py_ssize_t big_from;   /* 0: not grown */
    int may_widen;
    uint64_t big_seq, big_ns; /* the last big bag published here, and when */
    Py_ssize_t loan_n;     /* the size of the open loan, -1 while none */
    PyObject *slow;        /* called with the payload when the fast path cannot publish it */
    PyObject *cell;        /* the node's origin cell (set_origin): a list [origin_ns, origin_id], or NULL */
    uint64_t own_id;       /* the id stamped on bags this writer originates */
} Publisher;

static void release_view(Publisher *self) {
    if (self->attached) {
        PyBuffer_Release(&self->view);
        self->attached = 0;
    }
    self->q = NULL;
    self->word = NULL;
    self->sleepers = NULL;
    self->fits = -1;
    self->big_from = 0;
    self->loan_n = -1;
}

static int Publisher_init(Publisher *self, PyObject *args, PyObject *kwds) {
    PyObject *slow;
    if (!PyArg_ParseTuple(args, "O:Publisher", &slow))
        return -1;
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "Publisher(slow): slow must be callable");
        return -1;
    }
    PyObject *old = self->slow;
    self->slow = Py_NewRef(slow);
    Py_XDECREF(old);
    self->fits = -1;
    self->loan_n = -1;
    return 0;
}

static int Publisher_traverse(Publisher *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->slow);
    Py_VISIT(self->cell);
    return 0;
}

static int Publisher_clear(Publisher *self) {
    Py_CLEAR(self->slow);
    Py_CLEAR(self->cell);
    return 0;
}

static void release_cell(Publisher *self) {
    Py_CLEAR(self->cell);
}

static void Publisher_dealloc(Publisher *self) {
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    PyObject_GC_UnTrack((PyObject *)self);
    release_view(self);
    release_cell(self);
    Py_CLEAR(self->slow);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* attach(mapping, slots_offset, stride, count, slot_size, seq, fits) */
static PyObject *Publisher_attach(Publisher *self, PyObject *args) {
    PyObject *mapping;
    Py_ssize_t slots_off, stride, count, slot_size, fits;
    unsigned long long seq;
    if (!PyArg_ParseTuple(args, "OnnnnKn:attach", &mapping, &slots_off, &stride, &count, &slot_size, &seq, &fits))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(mapping, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (count < 2 || stride % 8 || slots_off % 8 || slot_size < 0 || stride < 64 + slot_size ||
        slots_off + stride * count > view.len || view.len < SLEEPERS_OFF + 64) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "attach: the slots do not fit the mapping");
        return NULL;
    }
    release_view(self);
    self->view = view;
    self->attached = 1;
    self->q = (uint64_t *)view.buf;
    self->word = (uint32_t *)((char *)view.buf + FUTEX_OFF);
    self->sleepers = (const uint64_t *)((char *)view.buf + SLEEPERS_OFF);
    self->slots_q = slots_off / 8;
    self->stride_q = stride / 8;
    self->count = count;
    self->slot_size = slot_size;
    self->seq = seq;
    self->next_index = (Py_ssize_t)(seq % (unsigned long long)count);
    self->fits = fits < slot_size ? fits : slot_size;
    self->big_from = 0;
    self->loan_n = -1;
    Py_RETURN_NONE;
}

/* set_grown(big_from, may_widen): this generation was grown for bags over big_from bytes (0: it
 * was not); may_widen: it has fewer slots than its budget allows (the writer widens it for an
 * ordered reader about to be lapped). */
static PyObject *Publisher_set_grown(Publisher *self, PyObject *args) {
    Py_ssize_t big_from;
    int may_widen;
    if (!PyArg_ParseTuple(args, "np:set_grown", &big_from, &may_widen))
        return NULL;
    self->big_from = big_from > 0 ? big_from : 0;
    self->may_widen = may_widen;
    Py_RETURN_NONE;
}

static inline uint64_t *next_slot(Publisher *self) {
    return self->q + self->slots_q + self->next_index * self->stride_q;
}

/* An ordered reader that the bag after the next would lap (its record's next bag is one the
 * write after next overwrites): the slow path widens the ring for it, if its process lives. */
static int ordered_reader_due(Publisher *self) {
    uint64_t ahead = self->seq + 2;
    if (ahead <= (uint64_t)self->count)
        return 0;
    uint64_t due = ahead - (uint64_t)self->count;
    const uint64_t *r = self->q + TABLE_Q;
    for (int i = 0; i < 64; i++, r += RECORD_Q)
        if (atomic_load_explicit((ring_word64 *)&r[R_ACTIVE], memory_order_relaxed) == ACTIVE_ORDERED &&
            atomic_load_explicit((ring_word64 *)&r[R_NEXT], memory_order_relaxed) <= due)
            return 1;
    return 0;
}

/* May a bag of n bytes be published without the slow path now? In a grown generation the holds
 * are loaded after the last publish's full fence (ring_announce): views.py's handshake. */
static int fast_ok(Publisher *self, Py_ssize_t n) {
    if (!self->attached || self->gated)
        return 0;
    if (n <= self->fits)
        return 1;
    if (!self->big_from || n <= self->big_from || n > self->slot_size)
        return 0;
    if (atomic_load_explicit((ring_word32 *)((char *)next_slot(self) + HELD_OFF), memory_order_relaxed))
        return 0;
    return !(self->may_widen && ordered_reader_due(self));
}
/* set_origin(cell, own_id): bags published while cell[0] is not 0 carry (cell[0], cell[1]) as
 * their origin; the others originate here, at their publish time, with own_id. cell is a list
 * of two ints (the node host's [origin_ns, origin_id]: a list, because storing into one costs
 * the interpreter ~20 instructions where an array('Q') costs ~400), or None. */
static PyObject *Publisher_set_origin(Publisher *self, PyObject *args) {
    PyObject *cell;
    unsigned long long own_id;
    if (!PyArg_ParseTuple(args, "OK:set_origin", &cell, &own_id))
        return NULL;
    if (cell != Py_None && (!PyList_Check(cell) || PyList_Size(cell) != 2)) {
        PyErr_SetString(PyExc_TypeError, "set_origin: the cell must be a list [origin_ns, origin_id]");
        return NULL;
    }
    release_cell(self);
    if (cell != Py_None)
        self->cell = Py_NewRef(cell);
    self->own_id = own_id;
    Py_RETURN_NONE;
}

/* The origin the cell holds now (0 when none, or when the cell holds something else). */
static inline void cell_origin(PyObject *cell, uint64_t *origin_ns, uint64_t *origin) {
    *origin_ns = 0;
    if (cell == NULL || PyList_Size(cell) != 2)
        return;
    *origin_ns = PyLong_AsUnsignedLongLongMask(PyList_GetItem(cell, 0));
    *origin = PyLong_AsUnsignedLongLongMask(PyList_GetItem(cell, 1));
    if (*origin_ns == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* not an int: the bag originates here */
        *origin_ns = 0;
    }
}

static PyObject *Publisher_detach(Publisher *self, PyObject *unused) {
    release_view(self);
    Py_RETURN_NONE;
}

static void announce(Publisher *self, uint64_t s, Py_ssize_t n, uint64_t t);

/* The store that publishes bag `s` and everything before it, then the wake if anyone may
 * sleep. The sequence words follow the ring's seqlock (ring/writer.py): odd while the payload is written,
 * even once it is whole. */
static uint64_t publish(Publisher *self, const char *data, Py_ssize_t n) {
    uint64_t origin_ns, origin;
    cell_origin(self->cell, &origin_ns, &origin);
    uint64_t s = self->seq + 1;
    uint64_t t = monotonic_ns();
    /* a bag written inside process() carries the oldest origin read in that call; a source's originates now */
    ring_publish_slot(next_slot(self), s, data, (size_t)n, t, origin_ns ? origin_ns : t,
                      origin_ns ? origin : self->own_id);
    announce(self, s, n, t);
    return s;
}

/* Bag s is whole in its slot: tell readers, and wake them if any may sleep. Dekker with a
 * sleeping reader (ring/wake.py's docstring): the word store is visible before the sleepers
 * line is loaded. */
static void announce(Publisher *self, uint64_t s, Py_ssize_t n, uint64_t t) {
    ring_announce(&self->q[WRITE_SEQ_Q], self->word, s, (uint32_t)(s & WORD_MASK));
    self->seq = s;
    if (self->big_from && n > self->big_from) {
        self->big_seq = s;
        self->big_ns = t;
    }
    if (++self->next_index == self->count)
        self->next_index = 0;
    const uint64_t *sl = self->sleepers;
    uint64_t any = 0;
    for (int i = 0; i < SLEEPERS_Q; i++)
        any |= atomic_load_explicit((ring_word64 *)&sl[i], memory_order_relaxed);
    if (any) {
        self->wakes++;
        syscall(SYS_futex, self->word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
}

static PyObject *publish_buffer(Publisher *self, PyObject *payload, int gated_ok) {
    const char *data;
    Py_ssize_t n;
    Py_buffer view;
    int held = 0;
    if (PyBytes_Check(payload)) {
        data = PyBytes_AsString(payload);
        n = PyBytes_Size(payload);
    } else {
        if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        data = (const char *)view.buf;
        n = view.len;
        held = 1;
    }
    if (gated_ok ? !self->attached || n > self->slot_size : !fast_ok(self, n)) {
        if (held)
            PyBuffer_Release(&view);
        if (gated_ok) {
            PyErr_Format(PyExc_ValueError, "publish: a bag of %zd bytes does not fit a slot of %zd bytes%s", n,
                         self->slot_size, self->attached ? "" : " (the ring is not attached)");
            return NULL;
        }
        if (self->slow == NULL) {
            PyErr_SetString(PyExc_ValueError, "write: this ring writer is closed");
            return NULL;
        }
        return PyObject_CallFunctionObjArgs(self->slow, payload, NULL);
    }
    uint64_t s = publish(self, data, n);
    if (held)
        PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(s);
}

static PyObject *Publisher_write(Publisher *self, PyObject *payload) {
    return publish_buffer(self, payload, 0);
}

static PyObject *Publisher_publish(Publisher *self, PyObject *payload) {
    return publish_buffer(self, payload, 1);
}

static PyObject *Publisher_gate(Publisher *self, PyObject *unused) {
    self->fits = -1;
    self->gated = 1;
    Py_RETURN_NONE;
}

static int set_fits(Publisher *self, PyObject *arg) {
    Py_ssize_t fits = PyLong_AsSsize_t(arg);
    if (fits == -1 && PyErr_Occurred())
        return -1;
    self->fits = self->attached ? (fits < self->slot_size ? fits : self->slot_size) : -1;
    self->gated = 0;
    return 0;
}

static PyObject *Publisher_open(Publisher *self, PyObject *arg) {
    if (set_fits(self, arg) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* loan(n) -> offset, or loan(n, fits) after the slow path made room (and open(fits) with it):
 * the next slot taken for a bag of n bytes written in place (ring/writer.py's RingWriter.loan),
 * its seq word odd, every other write gated until commit() or abort(); the offset in the mapping
 * of its payload. -1 (from loan(n) alone) where the fast path cannot take it: the caller makes
 * room under the writer's lock, then loans with fits. */
static PyObject *Publisher_loan(Publisher *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 && nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "loan(nbytes[, fits])");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (self->loan_n >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "loan: a loan of this ring writer is already open");
        return NULL;
    }
    if (n < 0 && nargs == 1)
        return PyLong_FromLong(-1); /* (the slow path says what is wrong, naming the ring) */
    if (nargs == 2) {
        if (set_fits(self, args[1]) < 0)
            return NULL;
        if (!self->attached || n < 0 || n > self->slot_size) {
            PyErr_Format(PyExc_ValueError, "loan: a bag of %zd bytes does not fit a slot of %zd bytes%s", n,
                         self->slot_size, self->attached ? "" : " (the ring is not attached)");
            return NULL;
        }
    } else if (!fast_ok(self, n)) {
        return PyLong_FromLong(-1);
    }
    uint64_t *h = next_slot(self);
    ring_open_slot(h, self->seq + 1);
    self->gated = 1;
    self->loan_n = n;
    return PyLong_FromSsize_t((Py_ssize_t)((char *)(h + RING_SLOT_HEADER_Q) - (char *)self->q));
}

/* commit() -> seq: publish the open loan's bag (its payload is in the slot); every write may take the fast path again. */
static PyObject *Publisher_commit(Publisher *self, PyObject *unused) {
    Py_ssize_t n = self->loan_n;
    if (n < 0 || !self->attached) {
        PyErr_SetString(PyExc_RuntimeError, "commit: no loan of this ring writer is open");
        return NULL;
    }
    uint64_t origin_ns, origin;
    cell_origin(self->cell, &origin_ns, &origin);
    uint64_t s = self->seq + 1;
    uint64_t t = monotonic_ns();
    ring_seal_slot(next_slot(self), s, (size_t)n, t, origin_ns ? origin_ns : t, origin_ns ? origin : self->own_id);
    announce(self, s, n, t);
    self->loan_n = -1;
    self->gated = 0;
    return PyLong_FromUnsignedLongLong(s);
}

/* abort(): the open loan publishes nothing (its slot stays odd: the bag it held is gone; the next bag goes there). */
static PyObject *Publisher_abort(Publisher *self, PyObject *unused) {
    self->loan_n = -1;
    self->gated = 0;
    Py_RETURN_NONE;
}

static PyObject *Publisher_get_big(Publisher *self, void *closure) {
    return Py_BuildValue("(KK)", (unsigned long long)self->big_seq, (unsigned long long)self->big_ns);
}

static PyObject *Publisher_get_seq(Publisher *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->seq);
}

static PyObject *Publisher_get_wakes(Publisher *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->wakes);
}

/* compare_exchange(addr, expected, new) -> bool: an atomic compare-and-swap of the u32 at
 * `addr`, sequentially consistent, and a full barrier for the plain loads and stores around
 * it (compare_exchange(a, v, v) is a fenced load): on x86-64 the locked instruction is one;
 * elsewhere (an arm64 CAS orders only itself) fences on both sides make it one. Readers claim and release the watcher's role with it (ring/wake.py);
 * wake.py passes only addresses of words in mappings it holds open. */
static PyObject *compare_exchange(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "compare_exchange(addr, expected, new) takes 3 arguments");
        return NULL;
    }
    unsigned long long addr = PyLong_AsUnsignedLongLong(args[0]);
    unsigned long expected = PyLong_AsUnsignedLong(args[1]);
    unsigned long desired = PyLong_AsUnsignedLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (addr == 0 || addr % 4 || expected > UINT32_MAX || desired > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "compare_exchange: a 4-byte aligned address and two u32 values");
        return NULL;
    }
    uint32_t want = (uint32_t)expected;
#if !(defined(__x86_64__) || defined(__i386__))
    atomic_thread_fence(memory_order_seq_cst);
#endif
    int swapped = atomic_compare_exchange_strong_explicit((ring_word32 *)(uintptr_t)addr, &want, (uint32_t)desired,
                                                          memory_order_seq_cst, memory_order_seq_cst);
#if !(defined(__x86_64__) || defined(__i386__))
    atomic_thread_fence(memory_order_seq_cst);
#endif
    return PyBool_FromLong(swapped);
}

/* futex_wait(addr, expected, timeout_s) -> bool and futex_wake(addr, count=all) -> int: futex.py's
 * syscalls without ctypes, whose call costs ~1.5 us against ~0.1 us for the syscall itself,
 * on the path between a reader's wake and its node's process() (and a writer's last steps
 * before it sleeps, which a reader woken onto the writer's core waits for). Shared (not
 * PRIVATE) operations: the words live in MAP_SHARED files. The wait releases the GIL. */
static int futex_addr(PyObject *arg, uint32_t **addr) {
    unsigned long long a = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred())
        return -1;
    if (a == 0 || a % 4) {
        PyErr_SetString(PyExc_ValueError, "futex: a 4-byte aligned address");
        return -1;
    }
    *addr = (uint32_t *)(uintptr_t)a;
    return 0;
}

/* A wait's timeout in seconds (None: no limit; negative or NaN: none at all) as the timespec futex
 * takes: *tsp is ts, or NULL for no limit. -1 with an exception set when it is not a number. */
static int timeout_arg(PyObject *arg, struct timespec *ts, struct timespec **tsp) {
    *tsp = NULL;
    if (arg == Py_None)
        return 0;
    double t = PyFloat_AsDouble(arg);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    if (!(t > 0.0))
        t = 0.0; /* (NaN too) */
    if (t > 1e9)
        t = 1e9;
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec > 999999999)
        ts->tv_nsec = 999999999;
    *tsp = ts;
    return 0;
}

/* What a FUTEX_WAIT's return (rc, and errno as err) means to the caller. */
static PyObject *wait_result(long rc, int err) {
    if (rc == 0 || err == EAGAIN || err == EINTR)
        Py_RETURN_TRUE; /* woken, the word had changed, or a signal: the caller looks again */
    if (err == ETIMEDOUT)
        Py_RETURN_FALSE;
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
}

static PyObject *futex_wait(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "futex_wait(addr, expected, timeout_s) takes 3 arguments");
        return NULL;
    }
    uint32_t *addr;
    if (futex_addr(args[0], &addr) < 0)
        return NULL;
    unsigned long expected = PyLong_AsUnsignedLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (expected > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "futex_wait: the expected value is a u32");
        return NULL;
    }
    struct timespec ts, *tsp;
    if (timeout_arg(args[2], &ts, &tsp) < 0)
        return NULL;
    long rc;
    int err;
    Py_BEGIN_ALLOW_THREADS
    rc = syscall(SYS_futex, addr, FUTEX_WAIT, (uint32_t)expected, tsp, NULL, 0);
    err = errno;
    Py_END_ALLOW_THREADS
    return wait_result(rc, err);
}

static PyObject *futex_wake(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 && nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "futex_wake(addr, count=all) takes 1 or 2 arguments");
        return NULL;
    }
    uint32_t *addr;
    if (futex_addr(args[0], &addr) < 0)
        return NULL;
    long count = nargs == 2 ? PyLong_AsLong(args[1]) : INT_MAX;
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (count < 0 || count > INT_MAX)
        count = INT_MAX;
    long rc = syscall(SYS_futex, addr, FUTEX_WAKE, (int)count, NULL, NULL, 0);
    if (rc < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLong(rc);
}

/* watch_wait(mapping, index, expected, timeout_s) -> bool | int: ring/wake.py's wait as the watcher,
 * in C: the ~5 us of Python between a reader's wake and its next read were most of what a woken reader
 * spent before it had the bag. Claims the watcher's role for reader `index` (or finds it its own),
 * sets its sleepers byte, sleeps on the writer's word while it holds `expected` (at most timeout_s),
 * then clears the byte, releases the role (a compare-and-swap: the full barrier before the followers
 * line is read) and wakes the followers if any may sleep. True when woken (or the word had changed, or
 * a signal), False on timeout; an int, the watcher's index + 1, when another reader holds the role
 * (the caller follows it: wake.py). Holds a buffer export of `mapping` while it sleeps, as the Python
 * path's ctypes words do, so the ring cannot be unmapped under it. */
static PyObject *watch_wait(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "watch_wait(mapping, index, expected, timeout_s) takes 4 arguments");
        return NULL;
    }
    long index = PyLong_AsLong(args[1]);
    unsigned long expected = PyLong_AsUnsignedLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (index < 0 || index >= 64 || expected > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "watch_wait: a reader index 0..63 and a u32");
        return NULL;
    }
    struct timespec ts, *tsp;
    if (timeout_arg(args[3], &ts, &tsp) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (view.len < FOLLOWERS_OFF + 64 || ((uintptr_t)view.buf) % 8) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "watch_wait: the mapping is not a ring generation");
        return NULL;
    }
    char *base = (char *)view.buf;
    ring_word32 *watch = (ring_word32 *)(base + WATCH_OFF);
    uint32_t me = (uint32_t)index + 1;
    uint32_t watcher = atomic_load_explicit(watch, memory_order_seq_cst);
    PyObject *out;
    if (watcher > 64) { /* no reader's: a damaged word, which would stop every wait here */
        atomic_compare_exchange_strong(watch, &watcher, 0);
        out = Py_NewRef(Py_True);
    } else if (watcher != me && !(watcher == 0 && atomic_compare_exchange_strong(watch, &watcher, me))) {
        /* (after a failed claim: the reader that holds it now; none, or a damaged word: look again) */
        out = watcher >= 1 && watcher <= 64 ? PyLong_FromUnsignedLong(watcher) : Py_NewRef(Py_True);
    } else {
        _Atomic uint8_t *sleeper = (_Atomic uint8_t *)(base + SLEEPERS_OFF + index);
        atomic_store_explicit(sleeper, 1, memory_order_relaxed); /* before the kernel's barrier and load of the word */
        long rc;
        int err;
        Py_BEGIN_ALLOW_THREADS
        rc = syscall(SYS_futex, (uint32_t *)(base + FUTEX_OFF), FUTEX_WAIT, (uint32_t)expected, tsp, NULL, 0);
        err = errno;
        Py_END_ALLOW_THREADS
        atomic_store_explicit(sleeper, 0, memory_order_relaxed);
        uint32_t mine = me;
        atomic_compare_exchange_strong(watch, &mine, 0); /* the full barrier before the followers line is read */
        const uint64_t *followers = (const uint64_t *)(base + FOLLOWERS_OFF);
        uint64_t any = 0;
        for (int i = 0; i < 8; i++)
            any |= atomic_load_explicit((ring_word64 *)&followers[i], memory_order_relaxed);
        if (any) {
            ring_word32 *handoff = (ring_word32 *)(base + HANDOFF_OFF);
            atomic_fetch_add_explicit(handoff, 1, memory_order_seq_cst);
            syscall(SYS_futex, (uint32_t *)handoff, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        }
        out = wait_result(rc, err);
    }
    PyBuffer_Release(&view);
    return out;
}

/* clock_of(obj) -> int: time.monotonic_ns(), given (and ignoring) one argument: the getter of a
 * property (ctx.time, tatolab/_sdk/context.py) without a Python frame in between. */
static PyObject *clock_of(PyObject *module, PyObject *unused) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return PyLong_FromUnsignedLongLong((uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec);
}

/* fence(): the loads before it happen before the loads after it (an acquire fence), for the
 * Python reader's copy where the CPU may reorder loads (ring/reader.py). */
static PyObject *fence(PyObject *module, PyObject *unused) {
    atomic_thread_fence(memory_order_acquire);
    Py_RETURN_NONE;
}

/* full_fence(): every store before it is visible before any load after it (futex.full_fence
 * where the CPU has no total store order). */
static PyObject *full_fence(PyObject *module, PyObject *unused) {
    atomic_thread_fence(memory_order_seq_cst);
    Py_RETURN_NONE;
}


/* RunReader(mapping, slots_q, stride_q, count, slot_size, hist, block_off, origins, read_q,
 * next_q, last_read_q): an ordered reader's runs out of one mapped generation, holding its
 * buffers (exports of the mappings) until close(). run(first, last) -> [(bytes, publish_ns)],
 * or [(bytes, publish_ns, origin_ns, origin)] when `origins`: copy bags first..last, in order,
 * while each is whole (its slot's seqlock word reads 2*s before and after the copy and its
 * length fits a slot), and stop at the first that is not (lapped, torn, damaged): the reader's
 * Python path sorts the rest out (ring.RingReader.read_many, whose loop this is, ~0.8 us a bag
 * in the interpreter). Each bag taken is recorded in the reader's latency block (`hist` the
 * mapped latency file, or None), and the reader's record counts them: words read_q (+= bags
 * taken), next_q (the next bag to read) and last_read_q (now) of the mapping. */
typedef struct {
    PyObject_HEAD
    Py_buffer view;
    Py_buffer hview;
    char *file; /* the latency file, or NULL */
    const uint64_t *q; /* NULL once closed */
    Py_ssize_t slots_q, stride_q, count, slot_size, block_off, read_q, next_q, last_read_q;
    int origins;
} RunReader;

static PyObject *RunReader_close(RunReader *self, PyObject *unused) {
    if (self->q != NULL) {
        PyBuffer_Release(&self->view);
        self->q = NULL;
    }
    if (self->file != NULL) {
        PyBuffer_Release(&self->hview);
        self->file = NULL;
    }
    Py_RETURN_NONE;
}

static int RunReader_init(RunReader *self, PyObject *args, PyObject *kwds) {
    PyObject *mapping, *hist, *block_off;
    int origins;
    Py_ssize_t slots_q, stride_q, count, slot_size, read_q, next_q, last_read_q;
    if (!PyArg_ParseTuple(args, "OnnnnOOpnnn:RunReader", &mapping, &slots_q, &stride_q, &count, &slot_size, &hist,
                          &block_off, &origins, &read_q, &next_q, &last_read_q))
        return -1;
    RunReader_close(self, NULL);
    if (PyObject_GetBuffer(mapping, &self->view, PyBUF_WRITABLE) < 0)
        return -1;
    Py_ssize_t words = self->view.len / 8;
    if (count < 1 || slots_q < 0 || slot_size < 0 || stride_q * 8 < 64 + slot_size ||
        (slots_q + stride_q * count) * 8 > self->view.len || read_q < 0 || read_q >= words || next_q < 0 ||
        next_q >= words || last_read_q < 0 || last_read_q >= words || ((uintptr_t)self->view.buf) % 8) {
        PyBuffer_Release(&self->view);
        PyErr_SetString(PyExc_ValueError, "RunReader: the slots and the record do not fit the mapping");
        return -1;
    }
    char *file;
    if (lat_block(hist, block_off, &self->hview, &file, &self->block_off) < 0) {
        PyBuffer_Release(&self->view);
        return -1;
    }
    self->file = file;
    self->q = (const uint64_t *)self->view.buf;
    self->slots_q = slots_q;
    self->stride_q = stride_q;
    self->count = count;
    self->slot_size = slot_size;
    self->origins = origins;
    self->read_q = read_q;
    self->next_q = next_q;
    self->last_read_q = last_read_q;
    return 0;
}

static void RunReader_dealloc(RunReader *self) {
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    RunReader_close(self, NULL);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* `taken` bags more read, `next` the one to read next, at `now`: the reader's record, as the Python path
 * keeps it (only this reader writes it; the runtime reads). */
static void count_taken(RunReader *self, uint64_t taken, uint64_t next, uint64_t now) {
    ring_word64 *w = (ring_word64 *)self->q;
    atomic_store_explicit(&w[self->read_q], atomic_load_explicit(&w[self->read_q], memory_order_relaxed) + taken,
                          memory_order_relaxed);
    atomic_store_explicit(&w[self->next_q], next, memory_order_relaxed);
    atomic_store_explicit(&w[self->last_read_q], now, memory_order_relaxed);
}

/* Bags first..last out of the slots (RunReader.run's loop, and the ordered fill's in _ordered.h): a
 * new list of the whole ones, in order, up to the first that is not; *end is the bag after the last
 * taken, and *first_ts, *last_ts the publish_ns of the first and last taken (when any). Each is
 * recorded in the latency block and the record counts them (read, next, last read at `now`). NULL with an exception set when Python is out of memory. */
static PyObject *run_copy(RunReader *self, unsigned long long first, unsigned long long last, uint64_t now,
                          unsigned long long *end, uint64_t *first_ts, uint64_t *last_ts) {
    const uint64_t *q = self->q;
    int origins = self->origins;
    LatNote note;
    if (self->file != NULL)
        lat_begin(&note, self->file, self->block_off, now);
    PyObject *out = PyList_New(0);
    unsigned long long s = first;
    for (; out != NULL && s <= last; s++) {
        const uint64_t *h = q + self->slots_q + (Py_ssize_t)((s - 1) % (unsigned long long)self->count) * self->stride_q;
        uint64_t n, ts;
        uint64_t v = ring_slot_open(h, s, (uint64_t)self->slot_size, &n, &ts);
        if (v == 0)
            break;
        uint64_t origin_ns, origin;
        ring_slot_origin(h, &origin_ns, &origin);
        PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
        if (data == NULL) {
            Py_CLEAR(out);
            break;
        }
        memcpy(PyBytes_AsString(data), h + RING_SLOT_HEADER_Q, (size_t)n);
        if (!ring_slot_still(h, v)) {
            Py_DECREF(data); /* the writer lapped the copy */
            break;
        }
        if (self->file != NULL)
            lat_add(&note, ts, origin_ns, origin);
        if (s == first)
            *first_ts = ts;
        *last_ts = ts;
        PyObject *stamp = PyLong_FromUnsignedLongLong(ts);
        PyObject *o_ns = origins && stamp != NULL ? PyLong_FromUnsignedLongLong(origin_ns) : NULL;
        PyObject *o_id = o_ns != NULL ? PyLong_FromUnsignedLongLong(origin) : NULL;
        PyObject *item = stamp == NULL || (origins && o_id == NULL) ? NULL : PyTuple_New(origins ? 4 : 2);
        if (item == NULL) {
            Py_DECREF(data);
            Py_XDECREF(stamp);
            Py_XDECREF(o_ns);
            Py_XDECREF(o_id);
            Py_CLEAR(out);
            break;
        }
        PyTuple_SetItem(item, 0, data);
        PyTuple_SetItem(item, 1, stamp);
        if (origins) {
            PyTuple_SetItem(item, 2, o_ns);
            PyTuple_SetItem(item, 3, o_id);
        }
        int failed = PyList_Append(out, item);
        Py_DECREF(item);
        if (failed)
            Py_CLEAR(out);
    }
    if (out != NULL && s > first) {
        count_taken(self, s - first, s, now);
    }
    *end = s;
    return out;
}

static PyObject *RunReader_run(RunReader *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "run(first, last)");
        return NULL;
    }
    unsigned long long first = PyLong_AsUnsignedLongLong(args[0]);
    unsigned long long last = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (self->q == NULL) {
        PyErr_SetString(PyExc_ValueError, "run: this RunReader is closed");
        return NULL;
    }
    if (first < 1) {
        PyErr_SetString(PyExc_ValueError, "run: bags are numbered from 1");
        return NULL;
    }
    unsigned long long end;
    uint64_t first_ts, last_ts;
    return run_copy(self, first, last, monotonic_ns(), &end, &first_ts, &last_ts);
}

/* The hold on a slot's views (views.py): one more (a full barrier, as compare_exchange's) or one fewer. */
static inline void hold_add(ring_word32 *held) {
#if !(defined(__x86_64__) || defined(__i386__))
    atomic_thread_fence(memory_order_seq_cst);
#endif
    atomic_fetch_add_explicit(held, 1, memory_order_seq_cst);
#if !(defined(__x86_64__) || defined(__i386__))
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

static inline void hold_drop(ring_word32 *held) {
    uint32_t have = atomic_load_explicit(held, memory_order_relaxed);
    while (have && !atomic_compare_exchange_weak_explicit(held, &have, have - 1, memory_order_seq_cst,
                                                          memory_order_relaxed)) {
    }
}

/* view(next, newest) -> (seq, offset, length, publish_ns, origin_ns, origin) or None: bag `next`
 * (newest: the latest, if not older than next) held in its slot of a grown generation, for
 * RingReader.read_view: its holds count one more, and the slot still holds it with the writer at
 * least a slot away (views.py's handshake), recorded and counted in the record as run() does.
 * None where that is not the case (nothing new, lapped, torn, the writer about to reach the slot):
 * the reader's Python path sorts it out, taking nothing here. */
static PyObject *RunReader_view(RunReader *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "view(next, newest)");
        return NULL;
    }
    unsigned long long next = PyLong_AsUnsignedLongLong(args[0]);
    if (next == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    int newest = PyObject_IsTrue(args[1]);
    if (newest < 0)
        return NULL;
    if (self->q == NULL) {
        PyErr_SetString(PyExc_ValueError, "view: this RunReader is closed");
        return NULL;
    }
    uint64_t *q = (uint64_t *)self->q;
    uint64_t count = (uint64_t)self->count;
    uint64_t ws = ring_load_acquire(&q[WRITE_SEQ_Q]);
    uint64_t s = newest ? ws : next;
    if (s < next || s > ws || s == 0 || s + count <= ws)
        Py_RETURN_NONE;
    uint64_t *h = q + self->slots_q + (Py_ssize_t)((s - 1) % count) * self->stride_q;
    uint64_t n, ts, origin_ns, origin;
    uint64_t v = ring_slot_open(h, s, (uint64_t)self->slot_size, &n, &ts);
    if (v == 0)
        Py_RETURN_NONE;
    ring_slot_origin(h, &origin_ns, &origin);
    ring_word32 *held = (ring_word32 *)((char *)h + HELD_OFF);
    hold_add(held);
    if (atomic_load_explicit((ring_word64 *)h, memory_order_relaxed) != v ||
        atomic_load_explicit((ring_word64 *)&q[WRITE_SEQ_Q], memory_order_relaxed) + 2 > s + count) {
        hold_drop(held); /* the writer is about to reach the slot: the Python path copies the bag */
        Py_RETURN_NONE;
    }
    PyObject *out = Py_BuildValue("(KnKKKK)", (unsigned long long)s,
                                  (Py_ssize_t)((char *)(h + RING_SLOT_HEADER_Q) - (char *)q), (unsigned long long)n,
                                  (unsigned long long)ts, (unsigned long long)origin_ns, (unsigned long long)origin);
    if (out == NULL) {
        hold_drop(held);
        return NULL;
    }
    uint64_t now = monotonic_ns();
    if (self->file != NULL) {
        LatNote note;
        lat_begin(&note, self->file, self->block_off, now);
        lat_add(&note, ts, origin_ns, origin);
    }
    count_taken(self, 1, s + 1, now);
    return out;
}

/* release_hold(addr): one view fewer of the slot whose holds count is the u32 at addr (views.py). */
static PyObject *release_hold(PyObject *module, PyObject *arg) {
    unsigned long long addr = PyLong_AsUnsignedLongLong(arg);
    if (addr == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (addr == 0 || addr % 4) {
        PyErr_SetString(PyExc_ValueError, "release_hold: a 4-byte aligned address");
        return NULL;
    }
    hold_drop((ring_word32 *)(uintptr_t)addr);
    Py_RETURN_NONE;
}

static PyMethodDef RunReader_methods[] = {
    {"view", (PyCFunction)(void (*)(void))RunReader_view, METH_FASTCALL,
     "view(next, newest) -> (seq, offset, length, publish_ns, origin_ns, origin) | None: a bag held in its "
     "slot of a grown generation, recorded and counted; None: the Python path's case."},
    {"run", (PyCFunction)(void (*)(void))RunReader_run, METH_FASTCALL,
     "run(first, last) -> [(bytes, publish_ns)]: the whole bags first..last, in order, up to the first "
     "that is not whole; each recorded, and counted in the reader's record."},
    {"close", (PyCFunction)RunReader_close, METH_NOARGS, "Release the mappings (before they are closed)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot RunReader_slots[] = {
    {Py_tp_doc, "RunReader(mapping, slots_q, stride_q, count, slot_size, hist, block_off, origins, read_q, "
                "next_q, last_read_q): an ordered ring reader's runs, in C (see ring/reader.py)."},
    {Py_tp_init, RunReader_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, RunReader_dealloc},
    {Py_tp_methods, RunReader_methods},
    {0, NULL},
};

static PyType_Spec RunReader_spec = {
    .name = "tatolab._links._native.RunReader",
    .basicsize = sizeof(RunReader),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = RunReader_slots,
};

#include "_ordered.h"

/* bag_fits(bag) -> bool: the fast walk of _bags.encode, exactly: True when `bag` is a dict
 * (exactly) of string keys (exactly) whose values are exactly str, int, float, bool, None,
 * bytes, bytearray or memoryview, or dicts, lists and tuples of those, nested at most
 * MAX_DEPTH deep. False sends the bag to _bags' slow path, which says what is wrong or
 * accepts subclasses. It calls no Python code, so nothing can change the bag meanwhile. */
#define MAX_DEPTH 64

static int fits_dict(PyObject *d, int depth);
static int fits_seq(PyObject *s, int depth);

static int fits_item(PyObject *v, int depth) {
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type || t == &PyLong_Type || t == &PyFloat_Type || t == &PyBool_Type || v == Py_None ||
        t == &PyBytes_Type || t == &PyByteArray_Type || t == &PyMemoryView_Type)
        return 1;
    if (t == &PyDict_Type)
        return depth < MAX_DEPTH && fits_dict(v, depth + 1);
    if (t == &PyList_Type || t == &PyTuple_Type)
        return depth < MAX_DEPTH && fits_seq(v, depth + 1);
    return 0;
}

static int fits_dict(PyObject *d, int depth) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(d, &pos, &key, &value))
        if (Py_TYPE(key) != &PyUnicode_Type || !fits_item(value, depth))
            return 0;
    return 1;
}

static int fits_seq(PyObject *s, int depth) {
    int list = Py_TYPE(s) == &PyList_Type;
    Py_ssize_t n = list ? PyList_Size(s) : PyTuple_Size(s);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!fits_item(list ? PyList_GetItem(s, i) : PyTuple_GetItem(s, i), depth))
            return 0;
    return 1;
}

static PyObject *bag_fits(PyObject *module, PyObject *bag) {
    return PyBool_FromLong(Py_TYPE(bag) == &PyDict_Type && fits_dict(bag, 0));
}

static PyMethodDef module_methods[] = {
    {"bag_fits", (PyCFunction)bag_fits, METH_O,
     "bag_fits(bag) -> bool: bag holds exactly what the fast path of _bags.encode takes."},
    {"compare_exchange", (PyCFunction)(void (*)(void))compare_exchange, METH_FASTCALL,
     "compare_exchange(addr, expected, new) -> bool: atomically set the u32 at addr to new if it "
     "holds expected (a full barrier either way)."},
    {"futex_wait", (PyCFunction)(void (*)(void))futex_wait, METH_FASTCALL,
     "futex_wait(addr, expected, timeout_s) -> bool: sleep while the u32 at addr holds expected, at most "
     "timeout_s (None: no limit); False only on timeout."},
    {"futex_wake", (PyCFunction)(void (*)(void))futex_wake, METH_FASTCALL,
     "futex_wake(addr, count=all) -> int: wake up to count waiters on the u32 at addr; how many woke."},
    {"fill_ordered", (PyCFunction)(void (*)(void))fill_ordered, METH_FASTCALL,
     "fill_ordered(link, reader, cell) -> bool | None: InputPort.fill for one ordered link, in C (None: "
     "the Python path's case)."},
    {"take_ordered", (PyCFunction)(void (*)(void))take_ordered, METH_FASTCALL,
     "take_ordered(link, origin, decode) -> bag | None: take and decode the bag delivered on a port's one ordered "
     "link, in C (None: the Python path's case)."},
    {"clock_of", (PyCFunction)clock_of, METH_O,
     "clock_of(obj) -> int: time.monotonic_ns(), ignoring its argument (a property's getter, without a frame)."},
    {"watch_wait", (PyCFunction)(void (*)(void))watch_wait, METH_FASTCALL,
     "watch_wait(mapping, index, expected, timeout_s) -> bool | int: a reader's wait as the ring's watcher "
     "(ring/wake.py); the watcher's index + 1 when another reader holds the role."},
    {"release_hold", (PyCFunction)release_hold, METH_O,
     "release_hold(addr): one view fewer of the slot whose holds count is the u32 at addr."},
    {"fence", (PyCFunction)fence, METH_NOARGS, "An acquire fence: the loads before it happen before the loads after it."},
    {"full_fence", (PyCFunction)full_fence, METH_NOARGS,
     "A sequentially consistent fence: every store before it is visible before any load after it."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef Publisher_methods[] = {
    {"attach", (PyCFunction)Publisher_attach, METH_VARARGS,
     "attach(mapping, slots_offset, stride, count, slot_size, seq, fits): publish into this "
     "generation from bag seq + 1 on; holds a buffer export of `mapping` until detach()."},
    {"set_origin", (PyCFunction)Publisher_set_origin, METH_VARARGS,
     "set_origin(cell, own_id): where the origin stamped on each bag comes from (see latency.py)."},
    {"detach", (PyCFunction)Publisher_detach, METH_NOARGS,
     "Release the mapping; every write goes to the slow callback until the next attach."},
    {"write", (PyCFunction)Publisher_write, METH_O,
     "Publish a bag (bytes or any buffer) and wake sleeping readers; returns its sequence "
     "number. A bag larger than the fast path takes (gated, too big, detached) goes to the "
     "slow callback, whose result is returned."},
    {"publish", (PyCFunction)Publisher_publish, METH_O,
     "Publish a bag that fits a slot even while gated (the slow path's own write)."},
    {"gate", (PyCFunction)Publisher_gate, METH_NOARGS, "Send every write to the slow callback."},
    {"open", (PyCFunction)Publisher_open, METH_O, "open(fits): bags up to `fits` bytes take the fast path."},
    {"set_grown", (PyCFunction)Publisher_set_grown, METH_VARARGS,
     "set_grown(big_from, may_widen): bags over big_from bytes that fit a slot take the fast path (0: none)."},
    {"loan", (PyCFunction)(void (*)(void))Publisher_loan, METH_FASTCALL,
     "loan(nbytes[, fits]) -> offset of the next slot's payload, taken for a bag written in place; -1: the slow path's."},
    {"commit", (PyCFunction)Publisher_commit, METH_NOARGS, "Publish the open loan's bag; returns its sequence number."},
    {"abort", (PyCFunction)Publisher_abort, METH_NOARGS, "Close the open loan without publishing."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Publisher_getset[] = {
    {"seq", (getter)Publisher_get_seq, NULL, "The sequence number of the last bag published.", NULL},
    {"wakes", (getter)Publisher_get_wakes, NULL, "How many publishes found a sleeper and called FUTEX_WAKE.", NULL},
    {"big", (getter)Publisher_get_big, NULL, "(seq, publish_ns) of the last big bag the fast path published.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Publisher_slots[] = {
    {Py_tp_doc, "Publisher(slow): the ring writer's fast path (see ring.RingWriter)."},
    {Py_tp_init, Publisher_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Publisher_dealloc},
    {Py_tp_traverse, Publisher_traverse},
    {Py_tp_clear, Publisher_clear},
    {Py_tp_methods, Publisher_methods},
    {Py_tp_getset, Publisher_getset},
    {0, NULL},
};

static PyType_Spec Publisher_spec = {
    .name = "tatolab._links._native.Publisher",
    .basicsize = sizeof(Publisher),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = Publisher_slots,
};

static int module_exec(PyObject *module) {
    PyObject *type = PyType_FromSpec(&Publisher_spec);
    if (type == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "Publisher", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    Py_DECREF(type);
    PyObject *runs = PyType_FromSpec(&RunReader_spec);
    if (runs == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "RunReader", runs) < 0) {
        Py_DECREF(runs);
        return -1;
    }
    Py_XDECREF(RunReader_type);
    RunReader_type = runs; /* (kept: fill_ordered knows a RunReader by it) */
    if (ordered_ready(module) < 0)
        return -1;
    PyObject *recorder = PyType_FromSpec(&Recorder_spec);
    if (recorder == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "Recorder", recorder) < 0) {
        Py_DECREF(recorder);
        return -1;
    }
    Py_DECREF(recorder);
    PyObject *timer = PyType_FromSpec(&NodeTimer_spec);
    if (timer == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "NodeTimer", timer) < 0) {
        Py_DECREF(timer);
        return -1;
    }
    Py_DECREF(timer);
    PyObject *layout = Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "write_seq_q", WRITE_SEQ_Q,
                                     "futex_off", FUTEX_OFF, "sleepers_off", SLEEPERS_OFF, "slot_header", 64,
                                     "latency_file_bytes", LAT_FILE_BYTES, "table_q", TABLE_Q, "record_q", RECORD_Q,
                                     "r_active", R_ACTIVE, "r_next", R_NEXT, "active_ordered", ACTIVE_ORDERED,
                                     "held_off", HELD_OFF, "watch_off", WATCH_OFF, "handoff_off", HANDOFF_OFF,
                                     "followers_off", FOLLOWERS_OFF);
    if (layout == NULL)
        return -1;
    if (PyModule_AddObject(module, "LAYOUT", layout) < 0) {
        Py_DECREF(layout);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tatolab._links._native",
    .m_doc = "The links' hot paths in C: the ring writer's publish, a reader's run of bags, the readers' "
             "compare-and-swap (see tatolab/_links/ring/).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__native(void) {
    return PyModuleDef_Init(&native_module);
}
