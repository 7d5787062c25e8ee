/* The node host's per-bag path for an input fed by one ordered link, in C (included by _native.c
 * after RunReader): what tatolab/_host/ports.py's InputPort.fill and Inputs.read's take-and-decode
 * do in the common case, in one call each, where the interpreter spent ~2 us a bag between the
 * reader's wake and process() (bench/nodes.py). Each returns None where the case is not the common
 * one (a backlog, a moved or grown ring, a lapped or torn bag, a bag that does not decode), and the
 * Python path, which stays the definition, does it: both leave the reader, the link and the cells
 * exactly as the Python path does (tests/test_ordered_path.py runs both over the same rings).
 *
 * The objects are the Python ones (a RingReader, a ports._Link, the node's cells): the reader's position
 * and counters and the link's pending bag are members of their C bases (ReaderCore, LinkCore below), which
 * the Python path reads and writes as slots, and these without a lookup (a generic attribute access from
 * C cost more than the bytecode it replaced).
 */
#ifndef TATOLAB_ORDERED_H
#define TATOLAB_ORDERED_H

#define MOVED_Q 7   /* ring/layout.py's _MOVED */
#define RUN_LIMIT 64 /* RingReader.read_many's default limit */

#include <structmember.h> /* PyMemberDef's T_OBJECT_EX (the stable ABI's since 3.2) */

/* ReaderCore: the base of ring.RingReader where this module was built, holding the reader's
 * position and counters as object members. Python reads and writes them as it would instance
 * attributes (a member is one of its specialised loads), and fill_ordered reaches them without a
 * lookup. LinkCore: the same for ports._Link's pending bag, its backlog and the time they left the ring. */
typedef struct {
    PyObject_HEAD
    PyObject *next, *read_count, *gap, *last_ts, *last_seq, *runs, *big, *views;
} ReaderCore;

typedef struct {
    PyObject_HEAD
    PyObject *pending, *backlog, *taken;
} LinkCore;

static PyObject *ReaderCore_type, *LinkCore_type, *RunReader_type; /* set by module_exec */
static PyObject *s_extend;

#define CORE_MEMBER(type, name, field) {name, T_OBJECT_EX, offsetof(type, field), 0, NULL}
static PyMemberDef ReaderCore_members[] = {
    CORE_MEMBER(ReaderCore, "_next", next),           CORE_MEMBER(ReaderCore, "read_count", read_count),
    CORE_MEMBER(ReaderCore, "_gap", gap),             CORE_MEMBER(ReaderCore, "_last_ts", last_ts),
    CORE_MEMBER(ReaderCore, "_last_seq", last_seq),   CORE_MEMBER(ReaderCore, "_runs", runs),
    CORE_MEMBER(ReaderCore, "_big", big),             CORE_MEMBER(ReaderCore, "views", views),
    {NULL, 0, 0, 0, NULL},
};
static PyMemberDef LinkCore_members[] = {
    CORE_MEMBER(LinkCore, "pending", pending),
    CORE_MEMBER(LinkCore, "backlog", backlog),
    CORE_MEMBER(LinkCore, "taken", taken),
    {NULL, 0, 0, 0, NULL},
};

static int ReaderCore_traverse(ReaderCore *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->next);
    Py_VISIT(self->read_count);
    Py_VISIT(self->gap);
    Py_VISIT(self->last_ts);
    Py_VISIT(self->last_seq);
    Py_VISIT(self->runs);
    Py_VISIT(self->big);
    Py_VISIT(self->views);
    return 0;
}

static int ReaderCore_clear(ReaderCore *self) {
    Py_CLEAR(self->next);
    Py_CLEAR(self->read_count);
    Py_CLEAR(self->gap);
    Py_CLEAR(self->last_ts);
    Py_CLEAR(self->last_seq);
    Py_CLEAR(self->runs);
    Py_CLEAR(self->big);
    Py_CLEAR(self->views);
    return 0;
}

static int LinkCore_traverse(LinkCore *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->pending);
    Py_VISIT(self->backlog);
    Py_VISIT(self->taken);
    return 0;
}

static int LinkCore_clear(LinkCore *self) {
    Py_CLEAR(self->pending);
    Py_CLEAR(self->backlog);
    Py_CLEAR(self->taken);
    return 0;
}

static void core_dealloc(PyObject *self, inquiry clear) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    clear(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

static void ReaderCore_dealloc(PyObject *self) { core_dealloc(self, (inquiry)ReaderCore_clear); }
static void LinkCore_dealloc(PyObject *self) { core_dealloc(self, (inquiry)LinkCore_clear); }

static PyType_Slot ReaderCore_slots[] = {
    {Py_tp_doc, "The members of ring.RingReader that its per-bag path in C reads and writes (see _ordered.h)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, ReaderCore_dealloc},
    {Py_tp_traverse, ReaderCore_traverse},
    {Py_tp_clear, ReaderCore_clear},
    {Py_tp_members, ReaderCore_members},
    {0, NULL},
};
static PyType_Slot LinkCore_slots[] = {
    {Py_tp_doc, "The members of ports._Link that its per-bag path in C reads and writes (see _ordered.h)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, LinkCore_dealloc},
    {Py_tp_traverse, LinkCore_traverse},
    {Py_tp_clear, LinkCore_clear},
    {Py_tp_members, LinkCore_members},
    {0, NULL},
};
static PyType_Spec ReaderCore_spec = {
    .name = "tatolab._links._native.ReaderCore",
    .basicsize = sizeof(ReaderCore),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = ReaderCore_slots,
};
static PyType_Spec LinkCore_spec = {
    .name = "tatolab._links._native.LinkCore",
    .basicsize = sizeof(LinkCore),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = LinkCore_slots,
};

/* A member's int (the reader's counters and times: below 2**63); -1 with an exception when unset.
 * (PyLong_AsLong: a loop over the digits, where AsLongLong goes through a byte array past one digit.) */
static int core_i64(PyObject *v, long long *out) {
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "fill_ordered: the reader is not set up");
        return -1;
    }
#if LONG_MAX >= LLONG_MAX
    *out = (long long)PyLong_AsLong(v);
#else
    *out = PyLong_AsLongLong(v);
#endif
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* Store an int in a member (the reference it held let go). */
static int core_set(PyObject **member, long long value) {
#if LONG_MAX >= LLONG_MAX
    PyObject *v = PyLong_FromLong((long)value);
#else
    PyObject *v = PyLong_FromLongLong(value);
#endif
    if (v == NULL)
        return -1;
    PyObject *old = *member;
    *member = v;
    Py_XDECREF(old);
    return 0;
}

/* Python's a // b for b > 0. */
static inline long long floor_div(long long a, long long b) {
    long long d = a / b;
    return (a % b != 0 && a < 0) ? d - 1 : d;
}

static int ordered_ready(PyObject *module) {
    if (s_extend == NULL && (s_extend = PyUnicode_InternFromString("extend")) == NULL)
        return -1;
    ReaderCore_type = PyType_FromSpec(&ReaderCore_spec);
    LinkCore_type = ReaderCore_type == NULL ? NULL : PyType_FromSpec(&LinkCore_spec);
    if (LinkCore_type == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "ReaderCore", ReaderCore_type) < 0 ||
        PyModule_AddObjectRef(module, "LinkCore", LinkCore_type) < 0)
        return -1;
    return 0; /* (the module keeps the types; so do these two references, for its life) */
}

/* fill_ordered(link, reader, cell) -> bool | None: InputPort.fill's one ordered link, its pending bag
 * taken and its backlog empty: the run of bags published since the reader's last (read_many, its first
 * pass), the first delivered (link.pending) and the rest behind it (link.backlog); link.taken the time
 * they left the ring, and cell[0] that time if it held none. False: nothing new. None: not the common
 * case (the reader is not compiled, its ring moved or grew for views, the next bag is lapped or torn):
 * nothing was taken, and the Python path does it. */
static PyObject *fill_ordered(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "fill_ordered(link, reader, cell) takes 3 arguments");
        return NULL;
    }
    PyObject *cell = args[2];
    if (!PyObject_TypeCheck(args[0], (PyTypeObject *)LinkCore_type) ||
        !PyObject_TypeCheck(args[1], (PyTypeObject *)ReaderCore_type) || !PyList_Check(cell))
        Py_RETURN_NONE; /* (the testing kit's reader, a cell of its own): the Python path */
    LinkCore *link = (LinkCore *)args[0];
    ReaderCore *reader = (ReaderCore *)args[1];
    if (reader->runs == NULL || (PyObject *)Py_TYPE(reader->runs) != RunReader_type ||
        ((RunReader *)reader->runs)->q == NULL)
        Py_RETURN_NONE; /* the Python reader (or closed) */
    if ((link->pending != NULL && link->pending != Py_None) || link->backlog == NULL)
        Py_RETURN_NONE; /* (the caller's case: a bag still delivered is fill's, in Python) */
    Py_ssize_t behind = PyObject_Size(link->backlog);
    if (behind != 0)
        return behind < 0 ? NULL : Py_NewRef(Py_None); /* bags already off the ring go first */
    if (reader->big != NULL && reader->big != Py_False) {
        int viewed = reader->views == NULL ? 0 : PyObject_IsTrue(reader->views);
        if (viewed < 0)
            return NULL;
        if (viewed && PyObject_IsTrue(reader->big))
            Py_RETURN_NONE; /* big bags as views of their slots: read_many's way */
    }
    RunReader *runs = (RunReader *)reader->runs;
    long long nxt;
    if (core_i64(reader->next, &nxt) < 0)
        return NULL;
    const uint64_t *q = runs->q;
    uint64_t ws = ring_load_acquire(&q[WRITE_SEQ_Q]);
    uint64_t moved = atomic_load_explicit((ring_word64 *)&q[MOVED_Q], memory_order_relaxed);
    if (moved || nxt < 1)
        Py_RETURN_NONE;
    if (ws < (uint64_t)nxt)
        Py_RETURN_FALSE; /* nothing new */
    unsigned long long last = ws;
    if (last - (unsigned long long)nxt >= RUN_LIMIT)
        last = (unsigned long long)nxt + RUN_LIMIT - 1;
    unsigned long long s;
    uint64_t first_ts = 0, last_ts_run = 0;
    Py_INCREF((PyObject *)runs); /* (held while copying: nothing here runs Python code, but the members are not ours) */
    PyObject *run = run_copy(runs, (unsigned long long)nxt, last, monotonic_ns(), &s, &first_ts, &last_ts_run);
    Py_DECREF((PyObject *)runs);
    if (run == NULL)
        return NULL;
    Py_ssize_t taken = PyList_Size(run);
    if (taken == 0) {
        Py_DECREF(run);
        Py_RETURN_NONE; /* lapped or torn: read_many's one-bag path counts the drops */
    }
    /* read_many's bookkeeping, as its Python lines do it */
    long long count, ts = (long long)last_ts_run, last_ts, last_seq, gap;
    if (core_i64(reader->read_count, &count) < 0)
        goto fail;
    if (taken > 1) {
        gap = floor_div(ts - (long long)first_ts, taken - 1);
    } else {
        if (core_i64(reader->last_ts, &last_ts) < 0 || core_i64(reader->last_seq, &last_seq) < 0)
            goto fail;
        long long apart = (long long)s - 1 - last_seq;
        if (apart <= 0) { /* (never: the reader's last bag is behind its next) */
            PyErr_SetString(PyExc_ZeroDivisionError, "fill_ordered: the reader's last bag is not behind its next");
            goto fail;
        }
        gap = floor_div(ts - last_ts, apart);
    }
    long long now = (long long)monotonic_ns();
    if (core_set(&reader->read_count, count + taken) < 0 || core_set(&reader->next, (long long)s) < 0 ||
        core_set(&reader->gap, gap) < 0 || core_set(&reader->last_ts, ts) < 0 ||
        core_set(&reader->last_seq, (long long)s - 1) < 0 || core_set(&link->taken, now) < 0)
        goto fail;
    /* the port's: the first delivered, the rest behind it, and the cell the time they left the ring */
    if (taken > 1) {
        PyObject *rest = PyList_GetSlice(run, 1, taken);
        PyObject *done = rest != NULL ? PyObject_CallMethodObjArgs(link->backlog, s_extend, rest, NULL) : NULL;
        Py_XDECREF(rest);
        if (done == NULL)
            goto fail;
        Py_DECREF(done);
    }
    PyObject *first = PyList_GetItem(run, 0);
    Py_INCREF(first);
    PyObject *old = link->pending;
    link->pending = first;
    Py_XDECREF(old);
    Py_DECREF(run);
    PyObject *held = PyList_GetItem(cell, 0);
    int set = held == NULL ? -1 : PyObject_IsTrue(held);
    if (set < 0)
        return NULL;
    if (!set) {
        PyObject *v = PyLong_FromLongLong(now);
        if (v == NULL || PyList_SetItem(cell, 0, v) < 0)
            return NULL;
    }
    Py_RETURN_TRUE;
fail:
    Py_DECREF(run);
    return NULL;
}

/* take_ordered(link, origin, decode) -> bag | None: Inputs.read's hot path for a port fed by one ordered
 * link (a LinkCore) whose bag is delivered: decode(payload), then what InputPort.take does with it (the
 * node's origin cell `origin`, a list or None, made the older of the two; the bag taken); the caller
 * sets the port's last_link. None: not that case (nothing delivered, a big bag as a view of its slot),
 * or the bag did not decode: nothing taken, and the Python path takes it (and counts it bad). */
static PyObject *take_ordered(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "take_ordered(link, origin, decode) takes 3 arguments");
        return NULL;
    }
    PyObject *cell = args[1];
    if (!PyObject_TypeCheck(args[0], (PyTypeObject *)LinkCore_type) || (cell != Py_None && !PyList_Check(cell)))
        Py_RETURN_NONE;
    LinkCore *link = (LinkCore *)args[0];
    PyObject *got = link->pending;
    if (got == NULL || !PyTuple_Check(got) || PyTuple_Size(got) < 2 || !PyBytes_Check(PyTuple_GetItem(got, 0)))
        Py_RETURN_NONE;
    Py_INCREF(got); /* (decode runs no Python code, but the member is not ours) */
    PyObject *bag = PyObject_CallFunctionObjArgs(args[2], PyTuple_GetItem(got, 0), NULL);
    if (bag == NULL) {
        PyErr_Clear(); /* the Python path decodes it again, and says what is wrong */
        Py_DECREF(got);
        Py_RETURN_NONE;
    }
    /* inherit_origin's rule (ports.py): the cell becomes the older origin of the two */
    if (cell != Py_None && PyTuple_Size(got) > 3 && PyList_Size(cell) >= 2) {
        PyObject *o_ns = PyTuple_GetItem(got, 2);
        int has = PyObject_IsTrue(o_ns);
        int older = 0;
        if (has > 0) {
            PyObject *held = PyList_GetItem(cell, 0);
            int empty = PyObject_Not(held);
            older = empty ? empty : PyObject_RichCompareBool(o_ns, held, Py_LT);
        }
        if (has < 0 || older < 0)
            goto fail;
        if (older > 0) {
            PyObject *o_id = PyTuple_GetItem(got, 3);
            Py_INCREF(o_ns);
            Py_INCREF(o_id);
            if (PyList_SetItem(cell, 0, o_ns) < 0 || PyList_SetItem(cell, 1, o_id) < 0)
                goto fail;
        }
    }
    if (link->pending == got) {
        link->pending = Py_None;
        Py_INCREF(Py_None);
        Py_DECREF(got); /* the member's reference */
    }
    Py_DECREF(got);
    return bag;
fail:
    Py_DECREF(bag);
    Py_DECREF(got);
    return NULL;
}

#endif
