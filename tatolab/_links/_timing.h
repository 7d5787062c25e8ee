/* A node's own times, included by _native.c after _latency.h: how long each process() call takes,
 * and how long the bags it was handed waited inside the node after leaving their ring. Two
 * histogram sets of the latency layout (_latency.h, latency.py) in the node's status file
 * (tatolab/_host/status.py), beside its busy/calls/ready words; written by the node host alone.
 */
#ifndef TATOLAB_TIMING_H
#define TATOLAB_TIMING_H

#define TIM_STATUS_BUSY 0
#define TIM_STATUS_CALLS 1
#define TIM_STATUS_READY 3
#define TIM_SETS_OFF 64 /* the process set, then the wait set (status.py: TIMING_OFF) */

/* NodeTimer(status_mapping, cell): begin() and end() around every process() call. `cell` is the
 * node's list [taken_ns]: the oldest time a bag handed over for this call left its ring (0: none);
 * begin records now minus it as the wait, and zeroes it. */
typedef struct {
    PyObject_HEAD
    Py_buffer view;
    char *file; /* NULL once closed */
    PyObject *zero;
    PyObject *cell;
} NodeTimer;

static int NodeTimer_init(NodeTimer *self, PyObject *args, PyObject *kwds) {
    PyObject *mapping, *cell;
    if (!PyArg_ParseTuple(args, "OO!:NodeTimer", &mapping, &PyList_Type, &cell))
        return -1;
    if (PyList_Size(cell) < 1) {
        PyErr_SetString(PyExc_ValueError, "NodeTimer: the cell is a list [taken_ns]");
        return -1;
    }
    Py_INCREF(cell);
    Py_XDECREF(self->cell);
    self->cell = cell;
    if (self->file != NULL) {
        PyBuffer_Release(&self->view);
        self->file = NULL;
    }
    if (PyObject_GetBuffer(mapping, &self->view, PyBUF_WRITABLE) < 0)
        return -1;
    if (self->view.len < TIM_SETS_OFF + 2 * LAT_SET_BYTES || ((uintptr_t)self->view.buf) % 8) {
        PyBuffer_Release(&self->view);
        PyErr_SetString(PyExc_ValueError, "NodeTimer: the status mapping is too small for its timing sets");
        return -1;
    }
    self->file = (char *)self->view.buf;
    if (self->zero == NULL)
        self->zero = PyLong_FromLong(0);
    return self->zero == NULL ? -1 : 0;
}

static PyObject *NodeTimer_close(NodeTimer *self, PyObject *unused) {
    if (self->file != NULL) {
        PyBuffer_Release(&self->view);
        self->file = NULL;
    }
    Py_RETURN_NONE;
}

static void NodeTimer_dealloc(NodeTimer *self) {
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    NodeTimer_close(self, NULL);
    Py_CLEAR(self->zero);
    Py_CLEAR(self->cell);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static inline void tim_record(char *set, uint64_t now, uint64_t age) {
    uint64_t sec = now / 1000000000ull;
    int slot = (int)(sec % LAT_WINDOW);
    lat_rotate(set, sec, slot);
    lat_record_set(set, age, slot);
}

static PyObject *NodeTimer_begin(NodeTimer *self, PyObject *unused) {
    PyObject *cell = self->cell;
    if (self->file == NULL)
        Py_RETURN_NONE;
    uint64_t *h = (uint64_t *)self->file;
    uint64_t now = monotonic_ns();
    h[TIM_STATUS_BUSY] = now;
    if (!h[TIM_STATUS_READY])
        h[TIM_STATUS_READY] = now;
    if (PyList_Size(cell) > 0) {
        PyObject *item = PyList_GetItem(cell, 0);
        unsigned long long taken = PyLong_Check(item) ? PyLong_AsUnsignedLongLongMask(item) : 0;
        if (taken) {
            tim_record(self->file + TIM_SETS_OFF + LAT_SET_BYTES, now, now > taken ? now - taken : 0);
            Py_INCREF(self->zero);
            PyList_SetItem(cell, 0, self->zero);
        }
    }
    Py_RETURN_NONE;
}

static PyObject *NodeTimer_end(NodeTimer *self, PyObject *unused) {
    if (self->file == NULL)
        Py_RETURN_NONE;
    uint64_t *h = (uint64_t *)self->file;
    uint64_t now = monotonic_ns(), began = h[TIM_STATUS_BUSY];
    if (began)
        tim_record(self->file + TIM_SETS_OFF, now, now > began ? now - began : 0);
    h[TIM_STATUS_BUSY] = 0;
    h[TIM_STATUS_CALLS]++;
    Py_RETURN_NONE;
}

static PyMethodDef NodeTimer_methods[] = {
    {"begin", (PyCFunction)NodeTimer_begin, METH_NOARGS,
     "begin(): a process() call begins now (the wait of the cell's bag, if any, is recorded, and the cell zeroed)."},
    {"end", (PyCFunction)NodeTimer_end, METH_NOARGS, "end(): the call returned (its time is recorded)."},
    {"close", (PyCFunction)NodeTimer_close, METH_NOARGS, "Release the mapping (before it is closed)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot NodeTimer_slots[] = {
    {Py_tp_doc, "NodeTimer(status_mapping, cell): a node's process and wait histograms (see tatolab/_host/status.py)."},
    {Py_tp_init, NodeTimer_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, NodeTimer_dealloc},
    {Py_tp_methods, NodeTimer_methods},
    {0, NULL},
};

static PyType_Spec NodeTimer_spec = {
    .name = "tatolab._links._native.NodeTimer",
    .basicsize = sizeof(NodeTimer),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = NodeTimer_slots,
};

#endif
