/* The links' hot paths in C: the ring writer's publish of one bag into a mapped ring
 * generation, and the compare-and-swap readers claim the watcher's role with.
 *
 * ring.py holds the protocol (layout, growth, moves, readers) and a pure-Python publish
 * that does exactly what `Publisher.write` does here; this module exists because the
 * interpreter spends ~1 us on the dozen stores, the copy, the clock read, the barrier and
 * the sleepers check that C does in ~60 ns (bench/write_cost.py, bench/links.py --write).
 * When it is not built (no compiler at install time, Python < 3.11, another ABI) ring.py
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
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Offsets shared with ring.py (checked there against this module's LAYOUT). */
#define WRITE_SEQ_Q 5
#define FUTEX_OFF 128
#define SLEEPERS_OFF 192
#define SLEEPERS_Q 8
#define WORD_MASK 0x7FFFFFFFu

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
    PyObject *slow;        /* called with the payload when the fast path cannot publish it */
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
    return 0;
}

static int Publisher_traverse(Publisher *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->slow);
    return 0;
}

static int Publisher_clear(Publisher *self) {
    Py_CLEAR(self->slow);
    return 0;
}

static void Publisher_dealloc(Publisher *self) {
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    PyObject_GC_UnTrack((PyObject *)self);
    release_view(self);
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
    Py_RETURN_NONE;
}

static PyObject *Publisher_detach(Publisher *self, PyObject *unused) {
    release_view(self);
    Py_RETURN_NONE;
}

/* The store that publishes bag `s` and everything before it, then the wake if anyone may
 * sleep. The sequence words follow ring.py's seqlock: odd while the payload is written,
 * even once it is whole. */
static uint64_t publish(Publisher *self, const char *data, Py_ssize_t n) {
    uint64_t s = self->seq + 1;
    uint64_t *q = self->q;
    uint64_t *h = q + self->slots_q + self->next_index * self->stride_q;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    __atomic_store_n(&h[0], 2 * s - 1, __ATOMIC_RELAXED);
    h[1] = (uint64_t)n;
    h[2] = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    __atomic_thread_fence(__ATOMIC_RELEASE); /* the odd word before any payload byte */
    memcpy((char *)(h + 8), data, (size_t)n);
    __atomic_store_n(&h[0], 2 * s, __ATOMIC_RELEASE);
    __atomic_store_n(&q[WRITE_SEQ_Q], s, __ATOMIC_RELEASE);
    __atomic_store_n(self->word, (uint32_t)(s & WORD_MASK), __ATOMIC_RELEASE);
    /* Dekker with a sleeping reader (ring.py's docstring): the word store is visible
     * before the sleepers line is loaded. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    self->seq = s;
    if (++self->next_index == self->count)
        self->next_index = 0;
    const uint64_t *sl = self->sleepers;
    uint64_t any = 0;
    for (int i = 0; i < SLEEPERS_Q; i++)
        any |= __atomic_load_n(&sl[i], __ATOMIC_RELAXED);
    if (any) {
        self->wakes++;
        syscall(SYS_futex, self->word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
    return s;
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
    if (!self->attached || (gated_ok ? n > self->slot_size : n > self->fits)) {
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
    Py_RETURN_NONE;
}

static PyObject *Publisher_open(Publisher *self, PyObject *arg) {
    Py_ssize_t fits = PyLong_AsSsize_t(arg);
    if (fits == -1 && PyErr_Occurred())
        return NULL;
    self->fits = self->attached ? (fits < self->slot_size ? fits : self->slot_size) : -1;
    Py_RETURN_NONE;
}

static PyObject *Publisher_get_seq(Publisher *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->seq);
}

static PyObject *Publisher_get_wakes(Publisher *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->wakes);
}

/* compare_exchange(addr, expected, new) -> bool: an atomic compare-and-swap of the u32 at
 * `addr`, sequentially consistent, so also a full barrier (compare_exchange(a, v, v) is a
 * fenced load). Readers claim and release the watcher's role with it (ring.py, "Waking");
 * ring.py passes only addresses of words in mappings it holds open. */
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
    int swapped = __atomic_compare_exchange_n((uint32_t *)(uintptr_t)addr, &want, (uint32_t)desired, 0,
                                              __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return PyBool_FromLong(swapped);
}

static PyMethodDef module_methods[] = {
    {"compare_exchange", (PyCFunction)(void (*)(void))compare_exchange, METH_FASTCALL,
     "compare_exchange(addr, expected, new) -> bool: atomically set the u32 at addr to new if it "
     "holds expected (a full barrier either way)."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef Publisher_methods[] = {
    {"attach", (PyCFunction)Publisher_attach, METH_VARARGS,
     "attach(mapping, slots_offset, stride, count, slot_size, seq, fits): publish into this "
     "generation from bag seq + 1 on; holds a buffer export of `mapping` until detach()."},
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
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Publisher_getset[] = {
    {"seq", (getter)Publisher_get_seq, NULL, "The sequence number of the last bag published.", NULL},
    {"wakes", (getter)Publisher_get_wakes, NULL, "How many publishes found a sleeper and called FUTEX_WAKE.", NULL},
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
    PyObject *layout = Py_BuildValue("{s:i,s:i,s:i,s:i}", "write_seq_q", WRITE_SEQ_Q, "futex_off", FUTEX_OFF,
                                     "sleepers_off", SLEEPERS_OFF, "slot_header", 64);
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
    .m_doc = "The links' hot paths in C: the ring writer's publish, the readers' compare-and-swap (see ring.py).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__native(void) {
    return PyModuleDef_Init(&native_module);
}
