/* The latency histograms' recording, included by _native.c (one compiled module): each ring
 * reader counts every bag's age, and its age since its origin, in its block of the ring's
 * latency file. tatolab/_links/latency.py holds the layout and the same code in Python.
 */
#ifndef TATOLAB_LATENCY_H
#define TATOLAB_LATENCY_H

/* Latency histograms (tatolab/_links/latency.py holds the layout and the same code in Python).
 * Each reader writes only its own block, so plain stores do; the runtime reads them racily,
 * which costs it at most a bag's worth of accuracy. */
#define LAT_BUCKETS 112
#define LAT_WINDOW 12
#define LAT_SETS 9
#define LAT_SET_BYTES 6528
#define LAT_BLOCK_BYTES (LAT_SETS * LAT_SET_BYTES)
#define LAT_HEADER_BYTES 4096
#define LAT_FILE_BYTES (LAT_HEADER_BYTES + 64 * LAT_BLOCK_BYTES)
#define LAT_STARTS_Q 2
#define LAT_SECS_Q 8
#define LAT_MAXS_Q 20
#define LAT_TOTAL_Q 32
#define LAT_WIN_OFF 1152

static inline int lat_bucket(uint64_t ns) {
    if (ns < 1024)
        return 0;
    int e = 63 - __builtin_clzll(ns);
    int i = (e - 10) * 4 + (int)((ns >> (e - 2)) & 3) + 1;
    return i < LAT_BUCKETS ? i : LAT_BUCKETS - 1;
}

/* Make the set's window slot for second `sec` current: a new second counts from zero. Once per
 * run of bags (lat_begin) or per change of path set (lat_add), never per bag. */
static inline void lat_rotate(char *set, uint64_t sec, int slot) {
    uint64_t *h = (uint64_t *)set;
    if (h[LAT_SECS_Q + slot] != sec) {
        memset((uint32_t *)(set + LAT_WIN_OFF) + slot * LAT_BUCKETS, 0, LAT_BUCKETS * sizeof(uint32_t));
        h[LAT_MAXS_Q + slot] = 0;
        h[LAT_SECS_Q + slot] = sec;
    }
}

/* Count `age` in a set whose slot is current (lat_rotate): ~20 instructions. */
static inline void lat_record_set(char *set, uint64_t age, int slot) {
    uint64_t *h = (uint64_t *)set;
    int b = lat_bucket(age);
    h[1]++;
    h[LAT_TOTAL_Q + b]++;
    ((uint32_t *)(set + LAT_WIN_OFF))[slot * LAT_BUCKETS + b]++;
    if (age > h[LAT_MAXS_Q + slot]) {
        h[LAT_MAXS_Q + slot] = age;
        if (age > h[2])
            h[2] = age;
    }
}

/* A reader recording bags read at `now` into its block: the second and window slot they count
 * in, and the path set of the last origin seen (bags in a row mostly share one). */
typedef struct {
    char *block;
    uint64_t now, sec;
    int slot;
    uint64_t last_origin;
    char *last_set;
} LatNote;

static void lat_begin(LatNote *n, char *file, Py_ssize_t block_off, uint64_t now) {
    char *block = file + block_off;
    uint64_t *lh = (uint64_t *)block;
    uint64_t starts = ((uint64_t *)file)[LAT_STARTS_Q];
    if (lh[3] != starts) {
        if (lh[3]) { /* the writer restarted: the windows start again */
            for (int k = 0; k < LAT_SETS; k++)
                memset(block + k * LAT_SET_BYTES + LAT_SECS_Q * 8, 0, LAT_WINDOW * 8);
            lh[4]++;
        }
        lh[3] = starts;
    }
    n->block = block;
    n->now = now;
    n->sec = now / 1000000000ull;
    n->slot = (int)(n->sec % LAT_WINDOW);
    n->last_origin = 0;
    n->last_set = NULL;
    lat_rotate(block, n->sec, n->slot);
}

/* One bag: its age on the link, and its age since its origin on the path from output `origin`
 * (0: no origin known, as in a ring an older writer filled). */
static inline void lat_add(LatNote *n, uint64_t ts, uint64_t origin_ns, uint64_t origin) {
    uint64_t now = n->now;
    lat_record_set(n->block, now > ts ? now - ts : 0, n->slot);
    if (!origin)
        return;
    char *set = n->last_set;
    if (n->last_origin != origin) {
        set = NULL;
        for (int k = 1; set == NULL && k < LAT_SETS; k++) {
            char *candidate = n->block + k * LAT_SET_BYTES;
            uint64_t have = ((uint64_t *)candidate)[0];
            if (have == origin || !have) {
                if (!have)
                    ((uint64_t *)candidate)[0] = origin;
                set = candidate;
            }
        }
        if (set == NULL) {
            ((uint64_t *)n->block)[5]++;
            return;
        }
        lat_rotate(set, n->sec, n->slot);
        n->last_origin = origin;
        n->last_set = set;
    }
    lat_record_set(set, now > origin_ns ? now - origin_ns : 0, n->slot);
}

static uint64_t monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

/* The latency file and block a reader records into, from RunReader's or note's arguments;
 * 0 with file NULL when there is none (None), -1 with an exception set when they do not fit. */
static int lat_block(PyObject *hist, PyObject *off_obj, Py_buffer *view, char **file, Py_ssize_t *off) {
    *file = NULL;
    if (hist == Py_None)
        return 0;
    *off = PyLong_AsSsize_t(off_obj);
    if (*off == -1 && PyErr_Occurred())
        return -1;
    if (PyObject_GetBuffer(hist, view, PyBUF_WRITABLE) < 0)
        return -1;
    if (view->len < LAT_FILE_BYTES || *off < LAT_HEADER_BYTES || (*off - LAT_HEADER_BYTES) % LAT_BLOCK_BYTES ||
        *off + LAT_BLOCK_BYTES > view->len || ((uintptr_t)view->buf) % 8) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "the latency block does not fit its file");
        return -1;
    }
    *file = (char *)view->buf;
    return 0;
}

/* Recorder(latency_mapping, block_off): a reader's block, held (a buffer export of the mapping)
 * until close(); note(publish_ns, origin_ns, origin) records one bag read now. The one-bag read
 * path's recording (ring/reader.py); RunReader records its runs itself. */
typedef struct {
    PyObject_HEAD
    Py_buffer view;
    char *file; /* NULL once closed */
    Py_ssize_t off;
} Recorder;

static int Recorder_init(Recorder *self, PyObject *args, PyObject *kwds) {
    PyObject *mapping, *off;
    if (!PyArg_ParseTuple(args, "OO:Recorder", &mapping, &off))
        return -1;
    if (self->file != NULL) {
        PyBuffer_Release(&self->view);
        self->file = NULL;
    }
    char *file;
    if (lat_block(mapping, off, &self->view, &file, &self->off) < 0)
        return -1;
    self->file = file;
    return 0;
}

static PyObject *Recorder_close(Recorder *self, PyObject *unused) {
    if (self->file != NULL) {
        PyBuffer_Release(&self->view);
        self->file = NULL;
    }
    Py_RETURN_NONE;
}

static void Recorder_dealloc(Recorder *self) {
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    Recorder_close(self, NULL);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Recorder_note(Recorder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "note(publish_ns, origin_ns, origin)");
        return NULL;
    }
    /* (the mask conversions: ~20 instructions where PyLong_AsUnsignedLongLong takes ~400) */
    unsigned long long ts = PyLong_AsUnsignedLongLongMask(args[0]);
    unsigned long long origin_ns = PyLong_AsUnsignedLongLongMask(args[1]);
    unsigned long long origin = PyLong_AsUnsignedLongLongMask(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (self->file != NULL) {
        LatNote n;
        lat_begin(&n, self->file, self->off, monotonic_ns());
        lat_add(&n, ts, origin_ns, origin);
    }
    Py_RETURN_NONE;
}

static PyMethodDef Recorder_methods[] = {
    {"note", (PyCFunction)(void (*)(void))Recorder_note, METH_FASTCALL,
     "note(publish_ns, origin_ns, origin): record one bag read now (its age, and its age since its origin)."},
    {"close", (PyCFunction)Recorder_close, METH_NOARGS, "Release the mapping (before it is closed)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Recorder_slots[] = {
    {Py_tp_doc, "Recorder(latency_mapping, block_off): a ring reader's latency block (see latency.py)."},
    {Py_tp_init, Recorder_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Recorder_dealloc},
    {Py_tp_methods, Recorder_methods},
    {0, NULL},
};

static PyType_Spec Recorder_spec = {
    .name = "tatolab._links._native.Recorder",
    .basicsize = sizeof(Recorder),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Recorder_slots,
};

#endif
