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
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Offsets shared with ring/layout.py (checked there against this module's LAYOUT). */
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
    Py_RETURN_NONE;
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

/* The store that publishes bag `s` and everything before it, then the wake if anyone may
 * sleep. The sequence words follow the ring's seqlock (ring/writer.py): odd while the payload is written,
 * even once it is whole. */
static uint64_t publish(Publisher *self, const char *data, Py_ssize_t n) {
    uint64_t origin_ns, origin;
    cell_origin(self->cell, &origin_ns, &origin);
    uint64_t s = self->seq + 1;
    uint64_t *q = self->q;
    uint64_t *h = q + self->slots_q + self->next_index * self->stride_q;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    __atomic_store_n(&h[0], 2 * s - 1, __ATOMIC_RELAXED);
    h[1] = (uint64_t)n;
    uint64_t t = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    h[2] = t;
    if (origin_ns) { /* written inside process(): the oldest origin read in that call */
        h[3] = origin_ns;
        h[4] = origin;
    } else { /* a source's bag originates now */
        h[3] = t;
        h[4] = self->own_id;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE); /* the odd word before any payload byte */
    memcpy((char *)(h + 8), data, (size_t)n);
    __atomic_store_n(&h[0], 2 * s, __ATOMIC_RELEASE);
    __atomic_store_n(&q[WRITE_SEQ_Q], s, __ATOMIC_RELEASE);
    __atomic_store_n(self->word, (uint32_t)(s & WORD_MASK), __ATOMIC_RELEASE);
    /* Dekker with a sleeping reader (ring/wake.py's docstring): the word store is visible
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
 * fenced load). Readers claim and release the watcher's role with it (ring/wake.py);
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
    int swapped = __atomic_compare_exchange_n((uint32_t *)(uintptr_t)addr, &want, (uint32_t)desired, 0,
                                              __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return PyBool_FromLong(swapped);
}


#include "_latency.h"

/* read_run(mapping, slots_q, stride_q, count, slot_size, first, last, hist, block_off, origins)
 * -> [(bytes, publish_ns)], or [(bytes, publish_ns, origin_ns, origin)] when `origins`:
 * copy bags first..last out of a mapped generation, in order, while each is whole: its
 * slot's seqlock word reads 2*s before and after the copy and its length fits a slot.
 * Stops at the first that is not (lapped, torn, damaged) and returns what it took: the
 * reader's Python path sorts the rest out and does the counting (ring.RingReader.read_many,
 * whose loop this is, ~0.8 us a bag in the interpreter). Each bag taken is recorded in the
 * reader's latency block (`hist` the mapped latency file, or None). */
static PyObject *read_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "read_run(mapping, slots_q, stride_q, count, slot_size, first, last, hist, block_off, origins)");
        return NULL;
    }
    int origins = PyObject_IsTrue(args[9]);
    if (origins < 0)
        return NULL;
    Py_ssize_t slots_q = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stride_q = PyLong_AsSsize_t(args[2]);
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    Py_ssize_t slot_size = PyLong_AsSsize_t(args[4]);
    unsigned long long first = PyLong_AsUnsignedLongLong(args[5]);
    unsigned long long last = PyLong_AsUnsignedLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (count < 1 || slots_q < 0 || slot_size < 0 || stride_q * 8 < 64 + slot_size || first < 1 ||
        (slots_q + stride_q * count) * 8 > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "read_run: the slots do not fit the mapping");
        return NULL;
    }
    Py_buffer hview;
    char *file;
    Py_ssize_t block_off;
    if (lat_block(args[7], args[8], &hview, &file, &block_off) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    LatNote note;
    if (file != NULL)
        lat_begin(&note, file, block_off, monotonic_ns());
    PyObject *out = PyList_New(0);
    const uint64_t *q = (const uint64_t *)view.buf;
    for (unsigned long long s = first; out != NULL && s <= last; s++) {
        const uint64_t *h = q + slots_q + (Py_ssize_t)((s - 1) % (unsigned long long)count) * stride_q;
        uint64_t v = __atomic_load_n(&h[0], __ATOMIC_ACQUIRE);
        if (v != 2 * s)
            break;
        uint64_t n = __atomic_load_n(&h[1], __ATOMIC_RELAXED);
        uint64_t ts = __atomic_load_n(&h[2], __ATOMIC_RELAXED);
        uint64_t origin_ns = __atomic_load_n(&h[3], __ATOMIC_RELAXED);
        uint64_t origin = __atomic_load_n(&h[4], __ATOMIC_RELAXED);
        if (n > (uint64_t)slot_size)
            break;
        PyObject *data = PyBytes_FromStringAndSize((const char *)(h + 8), (Py_ssize_t)n);
        if (data == NULL) {
            Py_CLEAR(out);
            break;
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the copy before the second look at the word */
        if (__atomic_load_n(&h[0], __ATOMIC_RELAXED) != v) {
            Py_DECREF(data); /* the writer lapped the copy */
            break;
        }
        if (file != NULL)
            lat_add(&note, ts, origin_ns, origin);
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
    PyBuffer_Release(&view);
    if (file != NULL)
        PyBuffer_Release(&hview);
    return out;
}

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
    {"read_run", (PyCFunction)(void (*)(void))read_run, METH_FASTCALL,
     "read_run(mapping, slots_q, stride_q, count, slot_size, first, last) -> [(bytes, publish_ns)]: "
     "the whole bags first..last, in order, up to the first that is not whole."},
    {"compare_exchange", (PyCFunction)(void (*)(void))compare_exchange, METH_FASTCALL,
     "compare_exchange(addr, expected, new) -> bool: atomically set the u32 at addr to new if it "
     "holds expected (a full barrier either way)."},
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
    PyObject *recorder = PyType_FromSpec(&Recorder_spec);
    if (recorder == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "Recorder", recorder) < 0) {
        Py_DECREF(recorder);
        return -1;
    }
    Py_DECREF(recorder);
    PyObject *layout = Py_BuildValue("{s:i,s:i,s:i,s:i,s:i}", "write_seq_q", WRITE_SEQ_Q, "futex_off", FUTEX_OFF,
                                     "sleepers_off", SLEEPERS_OFF, "slot_header", 64,
                                     "latency_file_bytes", LAT_FILE_BYTES);
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
