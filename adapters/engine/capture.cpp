/*
 * capture.cpp: the thin libtorch shim of the engine adapter. See gt_capture.h
 * for what it hands to C; this file only reads the engine.
 *
 * One at::RecordFunction callback sees every op at every nesting level and
 * every node the engine runs (BACKWARD_FUNCTION scope). An op is recorded
 * when no recorded op encloses it on this thread and its computed
 * AutogradCPU kernel is not the CompositeImplicitAutograd one: exactly the
 * ops a TorchDispatchMode sees. Its inputs are read at the start; since the
 * dispatcher destroys boxed inputs after the start callbacks, a copy of each
 * input's VariableVersion (one atomic increment) is kept to read its version
 * after the op, and a weak reference on written inputs to find the node an
 * in-place op gave them. At the end: versions after, outputs, and the new
 * autograd nodes (each output's grad_fn, then a walk over next_edges for
 * nodes never named: AccumulateGrad, custom autograd.Function, CopySlices),
 * with their saved tensors read through visitors generated at build time
 * from this torch's generated/Functions.h.
 *
 * Built with -DNDEBUG for the exact torch release found at build time, from
 * that release's headers: the private members it reads are named in
 * torch_layout.h, which checks them as it compiles; gt_capture_selftest
 * checks what they read at start-up, and the Python side falls back to the
 * dispatch adapter if not.
 */
#include "fingerprint.h"
#include "gt_capture.h"
#include "gradtrace/kwrites.h"
#include "torch_layout.h"

#include <ATen/SequenceNumber.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/functions/tensor.h>
#include <torch/csrc/autograd/generated/Functions.h>
#include <torch/csrc/autograd/python_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <sys/syscall.h>
#include <unistd.h>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <typeinfo>
#include <unordered_set>
#include <unordered_map>
#include <vector>

#ifndef NDEBUG
#error                                                                                   \
    "capture.cpp must be built with -DNDEBUG (RecordFunction's layout differs otherwise)"
#endif

namespace
{

using c10::impl::TorchDispatchModeTLS;
using torch::autograd::Node;
using torch::autograd::SavedVariable;

/* The private members read (torch_layout.h): a SavedVariable's, without
 * unpacking it (which would throw on a stale tensor) */
constexpr auto kSvData = member(gt_layout::SvData{});
constexpr auto kSvSavedVersion = member(gt_layout::SvSavedVersion{});
constexpr auto kSvIsOutput = member(gt_layout::SvIsOutput{});
constexpr auto kSvDefault = member(gt_layout::SvDefault{});
/* the thread's dispatch modes, read in place (TorchDispatchModeTLS::get_mode
 * returns a copy, any_modes_set and it cost about 70 instructions each) */
constexpr auto kModesStack = member(gt_layout::ModesStack{});
constexpr auto kModesInfra = member(gt_layout::ModesInfra{});
constexpr auto kVvCounter = member(gt_layout::VvCounter{});

/* A weak reference of a Node, or none (std::weak_ptr up to torch 2.12,
 * c10::weak_intrusive_ptr from 2.13). */
struct NodeRef {
    gt_layout::NodeWeak::type w = gt_layout::NodeWeak::empty();
    bool held = false;

    void hold(const Node *n)
    {
        w = gt_layout::NodeWeak::type(const_cast<Node *>(n)->getptr());
        held = true;
    }
    void clear()
    {
        w = gt_layout::NodeWeak::empty();
        held = false;
    }
    /* false only for a reference held to a node since destroyed */
    bool alive() const { return !held || !w.expired(); }
};

/* What an op does to one of its schema arguments (OpMeta::args). */
enum : uint8_t {
    ARG_WRITTEN = 1,  /* it writes it */
    ARG_UNMARKED = 2, /* without its schema saying so (a c10d collective's) */
    ARG_NOBUMP = 4,   /* maybe without a version bump: a kernel write when
                       * its counter did not move (include/gradtrace/kwrites.h) */
    ARG_WHEN = 8,     /* only when the op's `when` argument is true */
};

struct OpMeta {
    std::string name;
    bool is_op = false;
    bool composite = false;
    bool schema_writes = false; /* its schema marks an argument written */
    int when = -1;              /* position of the bool argument ARG_WHEN writes need */
    /* ARG_* of each schema argument, as many as it has (empty: it writes
     * none); set once, when the op is first seen */
    std::vector<uint8_t> args;

    uint8_t arg(size_t i) const { return i < args.size() ? args[i] : 0; }
};

struct Frame {
    uint64_t stamp;
    uint32_t stack;
    uint32_t vv_begin; /* index into Tls::vvs */
    uint32_t wk_begin; /* index into Tls::written */
    uint8_t recorded;
};

struct SavedVisitor;
struct GenVisitor {
    const char *mangled;
    const char *name;
    int nsaved;
    void (*fn)(const Node *, SavedVisitor &);
};

enum VKind { V_GEN, V_ACC, V_COPYSLICES, V_PYNODE, V_OTHER };

struct VisitorInfo {
    VKind kind = V_OTHER;
    const char *name = nullptr;
    void (*fn)(const Node *, SavedVisitor &) = nullptr;
};

struct NodeEnt {
    const Node *key = nullptr;
    uint64_t seqnr = 0, thread = 0, id = 0;
    NodeRef weak; /* AccumulateGrad */
};

struct Tls;

struct Cap {
    gt_capture_opts opts{};
    at::CallbackHandle handle = 0;
    std::atomic<bool> on{false};
    std::atomic<bool> active{true};
    std::atomic<uint64_t> stamp{0};
    std::atomic<int> in_backward{0};
    uint64_t gen = 0;
    const char *string_overload = nullptr;

    std::mutex mu; /* op metas, lanes list, visitors, interned names */
    std::unordered_map<const char *, OpMeta *> opmeta;
    std::unordered_map<std::string, OpMeta *> byname;
    std::deque<OpMeta> metas;
    std::unordered_map<const void *, VisitorInfo> vtmap; /* vtable -> visitor */
    std::unordered_map<std::string, VisitorInfo> genmap;
    std::deque<std::string> names; /* stable c_str()s */
    std::atomic<gt_cap_lane *> lanes{nullptr};
    gt_cap_lane *lanes_tail = nullptr;

    std::mutex nmu; /* node table */
    std::vector<NodeEnt> ntab;
    size_t nused = 0;
    uint64_t next_node = 0;
};

Cap *C = nullptr;
uint64_t g_gen = 0;

struct Tls {
    uint64_t gen = 0;
    gt_cap_lane *lane = nullptr;
    gt_cap_chunk *cur = nullptr;
    size_t used = 0;
    std::vector<Frame> frames;
    std::vector<c10::VariableVersion> vvs;
    std::vector<c10::weak_intrusive_ptr<c10::TensorImpl>> written;
    std::vector<c10::weak_intrusive_ptr<c10::TensorImpl>> fresh; /* see GT_CAP_REFRESH */
    struct Watch {
        c10::weak_intrusive_ptr<c10::TensorImpl> t;
        const void *storage;
    };
    std::vector<Watch> watch; /* saved tensors, see gt_capture_check_saved */
    std::unordered_set<const void *> watch_seen; /* scratch of that check */
    int vis_depth = 0;
    int bwd_depth = 0;
    uint64_t exec_pending = 0; /* node running, not yet written */
    std::vector<uint64_t> exec_stack;
    struct Work {
        const Node *n;
        uint64_t id;
    };
    std::vector<Work> work;         /* record_new_nodes' scratch */
    std::vector<gt_cap_edge> edges; /* record_new_nodes' scratch */
    bool busy = false;
    uint64_t last_stamp = 0;
    /* torch's thread-locals of this thread, their addresses taken once: each
     * read through torch's accessor (GradMode::is_enabled, ...) costs a call
     * into libc10, its __tls_init and a __tls_get_addr, 35 to 70
     * instructions, several times per op */
    const c10::AutogradState *autograd = nullptr;
    const c10::impl::PODLocalDispatchKeySet *keys = nullptr;
    const TorchDispatchModeTLS *modes = nullptr;
    static constexpr size_t kCache = 1024;
    const char *ckey[kCache] = {};
    const OpMeta *cval[kCache] = {};
    Tls()
    {
        frames.reserve(64);
        vvs.reserve(256);
        written.reserve(64);
        fresh.reserve(16);
    }
    ~Tls();
    void publish()
    {
        if (cur)
            __atomic_store_n(&cur->used, used, __ATOMIC_RELEASE);
    }
};

thread_local Tls t_tls;

/* &t_tls once this thread used it, else NULL. t_tls has a constructor, so
 * each access to it from this dlopen'ed module costs a call to its
 * __tls_init and two to __tls_get_addr (about 70 instructions, twice per
 * op); this pointer, trivially initialised, costs one __tls_get_addr.
 * Not initial-exec (one load from %fs): the module's thread-locals are one
 * block of 30 KB (t_tls, module.c's stack cache), which would all have to
 * come from glibc's static TLS surplus (about 1.5 KB): loading the module
 * fails with "cannot allocate memory in static TLS block". */
thread_local Tls *t_cur = nullptr;

Tls::~Tls()
{
    t_cur = nullptr;
    if (lane && C && gen == C->gen) {
        publish();
        __atomic_store_n(&lane->retired, 1, __ATOMIC_RELEASE);
    }
}

int64_t os_tid()
{
    return (int64_t)syscall(SYS_gettid);
}

gt_cap_chunk *chunk_new(gt_cap_lane *lane)
{
    uint64_t head = __atomic_load_n(&lane->ring_head, __ATOMIC_RELAXED);
    uint64_t tail = __atomic_load_n(&lane->ring_tail, __ATOMIC_ACQUIRE);
    gt_cap_chunk *c;
    if (head != tail) {
        c = lane->ring[head % GT_CAP_RING];
        __atomic_store_n(&lane->ring_head, head + 1, __ATOMIC_RELEASE);
    } else {
        c = static_cast<gt_cap_chunk *>(std::malloc(sizeof(gt_cap_chunk)));
        if (!c)
            return nullptr;
    }
    c->next = nullptr;
    c->used = 0;
    return c;
}

/* tls() the first time in this thread or in this capture: the lane. */
Tls *tls_slow()
{
    Tls &t = t_tls;
    t_cur = &t;
    t.autograd = &c10::AutogradState::get_tls_state();
    t.keys = &c10::impl::raw_local_dispatch_key_set;
    t.modes = &TorchDispatchModeTLS::get_state();
    if (t.gen == C->gen && t.lane)
        return &t;
    t.gen = C->gen;
    t.lane = nullptr;
    t.cur = nullptr;
    t.used = 0;
    t.frames.clear();
    t.vvs.clear();
    t.written.clear();
    t.watch.clear();
    t.vis_depth = t.bwd_depth = 0;
    t.busy = false;
    std::memset(t.ckey, 0, sizeof t.ckey);
    gt_cap_lane *lane = static_cast<gt_cap_lane *>(std::calloc(1, sizeof(gt_cap_lane)));
    if (!lane)
        return nullptr;
    lane->os_tid = os_tid();
    gt_cap_chunk *c = chunk_new(lane);
    if (!c) {
        std::free(lane);
        return nullptr;
    }
    lane->read = c;
    t.lane = lane;
    t.cur = c;
    std::lock_guard<std::mutex> g(C->mu);
    if (C->lanes_tail)
        __atomic_store_n(&C->lanes_tail->next_lane, lane, __ATOMIC_RELEASE);
    else
        C->lanes.store(lane, std::memory_order_release);
    C->lanes_tail = lane;
    return &t;
}

/* This thread's state, its lane created on first use in a capture. */
C10_ALWAYS_INLINE Tls *tls()
{
    Tls *t = t_cur;
    if (C10_LIKELY(t && t->gen == C->gen && t->lane))
        return t;
    return tls_slow();
}

/* Move this thread's lane on to a new chunk; false if none could be had. */
C10_NOINLINE bool next_chunk(Tls &t)
{
    gt_cap_chunk *c = chunk_new(t.lane);
    if (!c)
        return false;
    t.publish();
    __atomic_store_n(&t.cur->next, c, __ATOMIC_RELEASE);
    t.cur = c;
    t.used = 0;
    return true;
}

/* len bytes on this thread's lane (never more than a chunk). Inline: a
 * few instructions but for a new chunk, several times per op. */
C10_ALWAYS_INLINE unsigned char *reserve(Tls &t, size_t len, int type, uint64_t stamp)
{
    if (C10_UNLIKELY(t.used + len > GT_CAP_CHUNK) && !next_chunk(t))
        return nullptr;
    unsigned char *p = t.cur->data + t.used;
    t.used += len;
    gt_cap_hdr *h = reinterpret_cast<gt_cap_hdr *>(p);
    h->type = (uint16_t)type;
    h->flags = 0;
    h->len = (uint32_t)len;
    h->stamp = stamp;
    return p;
}

inline size_t pad8(size_t n)
{
    return (n + 7) & ~size_t(7);
}

/* dtype_name's and device_name's names, interned on first sight (zero
 * initialised, no guard) */
std::atomic<const char *> g_dtype_names[256];
/* by device type (64) and index + 1 (0: none, as the CPU's; 1..16: 0..15) */
constexpr int GT_DEV_INDEXES = 17;
std::atomic<const char *> g_device_names[64 * GT_DEV_INDEXES];

C10_NOINLINE const char *dtype_name_slow(at::ScalarType st)
{
    std::lock_guard<std::mutex> g(C->mu);
    /* torch's Python names (str(torch.float32) without "torch.") */
    std::string n;
    switch (st) {
    case at::kFloat:
        n = "float32";
        break;
    case at::kDouble:
        n = "float64";
        break;
    case at::kHalf:
        n = "float16";
        break;
    case at::kBFloat16:
        n = "bfloat16";
        break;
    case at::kInt:
        n = "int32";
        break;
    case at::kLong:
        n = "int64";
        break;
    case at::kShort:
        n = "int16";
        break;
    case at::kChar:
        n = "int8";
        break;
    case at::kByte:
        n = "uint8";
        break;
    case at::kBool:
        n = "bool";
        break;
    case at::kComplexHalf:
        n = "complex32";
        break;
    case at::kComplexFloat:
        n = "complex64";
        break;
    case at::kComplexDouble:
        n = "complex128";
        break;
    default:
        n = c10::toString(st);
        for (auto &ch : n)
            ch = (char)std::tolower((unsigned char)ch);
    }
    C->names.push_back(n);
    const char *s = C->names.back().c_str();
    g_dtype_names[(int)st & 255].store(s, std::memory_order_release);
    return s;
}

/* "float32", ... (torch's Python name, without "torch.") */
inline const char *dtype_name(at::ScalarType st)
{
    const char *s = g_dtype_names[(int)st & 255].load(std::memory_order_acquire);
    return C10_LIKELY(s) ? s : dtype_name_slow(st);
}

/* The slot of a device in g_device_names, or -1 past the table (an index
 * above 15: named each time). */
inline int device_slot(c10::Device d)
{
    int ix = (int)d.index() + 1;
    return ix < GT_DEV_INDEXES ? ((int)d.type() & 63) * GT_DEV_INDEXES + ix : -1;
}

C10_NOINLINE const char *device_name_slow(c10::Device d)
{
    std::lock_guard<std::mutex> g(C->mu);
    C->names.push_back(d.str());
    const char *s = C->names.back().c_str();
    int slot = device_slot(d);
    if (slot >= 0)
        g_device_names[slot].store(s, std::memory_order_release);
    return s;
}

/* "cpu", "cuda:0", ...: the device as torch prints it, with its index */
inline const char *device_name(c10::Device d)
{
    int slot = device_slot(d);
    const char *s =
        slot >= 0 ? g_device_names[slot].load(std::memory_order_acquire) : nullptr;
    return C10_LIKELY(s) ? s : device_name_slow(d);
}

inline bool geom_ok(const c10::TensorImpl *impl)
{
    return !impl->is_python_dispatch() && !impl->has_symbolic_sizes_strides() &&
           impl->layout() == c10::kStrided && !impl->is_nested();
}

inline const void *vc_ptr(const c10::VariableVersion &vv)
{
    return (vv.*kVvCounter).get();
}

/* The TensorImpl holding the data of impl: impl itself, or under torch.func
 * the tensor its wrappers (GradTrackingTensor, BatchedTensor) wrap, whose
 * storage and geometry the dispatch adapter records (it sees the unwrapped
 * tensors); identity and versions stay the wrapper's, which autograd saves
 * and bumps. */
std::atomic<bool> g_wrapper_ok{false};

/* functorch's TensorWrapper (ATen/functorch/TensorWrapper.h, whose includes
 * need nlohmann/json) holds `Tensor value_` as its first member after the
 * TensorImpl base: the address of its TensorImpl, read without following it.
 * Used only once gt_capture_wrapper_check found it right on a real one. */
inline const c10::TensorImpl *wrapper_value(const c10::TensorImpl *impl)
{
    const char *p = reinterpret_cast<const char *>(impl) + sizeof(c10::TensorImpl);
    return *reinterpret_cast<const c10::TensorImpl *const *>(p);
}

const c10::TensorImpl *data_impl(const c10::TensorImpl *impl)
{
    for (int depth = 0; depth < 64; depth++) {
        auto ks = impl->key_set();
        if (ks.has(c10::DispatchKey::FuncTorchGradWrapper)) {
            if (!g_wrapper_ok.load(std::memory_order_relaxed))
                break;
            impl = wrapper_value(impl);
        } else if (ks.has(c10::DispatchKey::FuncTorchBatched))
            impl = static_cast<const at::functorch::BatchedTensorImpl *>(impl)
                       ->value()
                       .unsafeGetTensorImpl();
        else
            break;
    }
    return impl;
}

const c10::DispatchKeySet kFuncTorchWrappers =
    c10::DispatchKeySet(c10::DispatchKey::FuncTorchGradWrapper) |
    c10::DispatchKeySet(c10::DispatchKey::FuncTorchBatched);

inline const c10::TensorImpl *data_of(const c10::TensorImpl *impl)
{
    return C10_UNLIKELY(impl->key_set().has_any(kFuncTorchWrappers)) ? data_impl(impl)
                                                                     : impl;
}

/* Facts of x; returns ndim of the geometry to append (0 if none), which
 * data_of(x's impl) holds. Inline: put_arg's call and its prologue were a
 * seventh of its cost. */
C10_ALWAYS_INLINE int facts(const at::TensorBase &x, gt_cap_tensor &f)
{
    std::memset(&f, 0, sizeof f);
    if (!x.defined()) {
        f.flags = GT_CAPT_UNDEF;
        return 0;
    }
    const c10::TensorImpl *impl = x.unsafeGetTensorImpl();
    f.impl = impl;
    const c10::VariableVersion &vv = impl->version_counter();
    f.vc = vc_ptr(vv);
    if (f.vc)
        f.version = vv.current_version();
    else
        f.flags |= GT_CAPT_NOVC;
    f.dtype = dtype_name(impl->dtype().toScalarType());
    f.device = device_name(impl->device());
    int nd = 0;
    const c10::TensorImpl *d = data_of(impl);
    if (d->has_storage() && geom_ok(d)) {
        const c10::StorageImpl *st = d->storage().unsafeGetStorageImpl();
        f.storage = st;
        auto nb = st->sym_nbytes().maybe_as_int();
        f.nbytes = nb ? (int64_t)*nb : -1;
        f.offset = d->storage_offset();
        nd = (int)d->dim();
    } else {
        f.flags |= GT_CAPT_NOGEOM;
    }
    f.ndim = (uint16_t)nd;
    if (x.requires_grad())
        f.flags |= GT_CAPT_REQGRAD;
    /* x.is_leaf(), without its virtual call through the variable hooks */
    auto *am = static_cast<const torch::autograd::AutogradMeta *>(impl->autograd_meta());
    if (!am || !am->grad_fn_)
        f.flags |= GT_CAPT_LEAF;
    return nd;
}

/* n int64 from src to dst: moves of a known size for the few dimensions
 * most tensors have (a call to memcpy costs more, and so does a loop) */
inline void copy_dims(int64_t *dst, const int64_t *src, int n)
{
    switch (n) {
    case 1:
        std::memcpy(dst, src, 8);
        break;
    case 2:
        std::memcpy(dst, src, 16);
        break;
    case 3:
        std::memcpy(dst, src, 24);
        break;
    case 4:
        std::memcpy(dst, src, 32);
        break;
    default:
        std::memcpy(dst, src, 8 * (size_t)n);
    }
}

void put_arg(Tls &t, int role, int pos, const at::Tensor &x, uint64_t stamp, bool written,
             bool unmarked = false, bool nobump = false)
{
    gt_cap_tensor f;
    int nd = facts(x, f);
    if (nd > GT_CAP_MAXDIM)
        nd = 0, f.flags |= GT_CAPT_NOGEOM;
    f.ndim = (uint16_t)nd;
    size_t len = sizeof(gt_cap_arg) + 16 * (size_t)nd;
    auto *r = reinterpret_cast<gt_cap_arg *>(reserve(t, len, GT_CAP_ARG, stamp));
    if (!r)
        return;
    r->role = (uint8_t)role;
    r->pos = pos;
    r->t = f;
    if (written)
        r->t.flags |= GT_CAPT_WRITTEN;
    if (unmarked)
        r->t.flags |= GT_CAPT_UNMARKED;
    if (nobump)
        r->t.flags |= GT_CAPT_NOBUMP;
    if (f.impl) {
        /* one atomic increment: the address stays this tensor's while the
         * consumer knows it by that address */
        c10::raw::weak_intrusive_ptr::incref(
            const_cast<c10::TensorImpl *>(x.unsafeGetTensorImpl()));
        r->t.flags |= GT_CAPT_WEAK;
    }
    if (nd) {
        int64_t *g = reinterpret_cast<int64_t *>(r + 1);
        const c10::TensorImpl *impl = data_of(x.unsafeGetTensorImpl());
        copy_dims(g, impl->sizes().data(), nd);
        copy_dims(g + nd, impl->strides().data(), nd);
    }
}

template <class F> inline void each_tensor(const c10::IValue &iv, F &&f)
{
    if (iv.isTensor()) {
        f(iv.toTensor());
    } else if (iv.isTensorList()) {
        auto l = iv.toTensorList();
        for (size_t i = 0; i < l.size(); i++)
            f(l.get(i));
    } else if (iv.isList()) {
        /* Tensor?[], and lists of lists (c10d's allgather_ outputs) */
        auto l = iv.toListRef();
        for (size_t i = 0; i < l.size(); i++)
            if (l[i].isTensor())
                f(l[i].toTensor());
            else if (l[i].isTensorList() || l[i].isList())
                each_tensor(l[i], f);
    }
}

/* ---- op metadata --------------------------------------------------------- */

/* Tensor, Tensor?, Tensor[], Tensor[][] ... */
bool tensorish(const c10::TypePtr &t)
{
    if (t->kind() == c10::TypeKind::TensorType)
        return true;
    if (auto o = t->cast<c10::OptionalType>())
        return tensorish(o->getElementType());
    if (auto l = t->cast<c10::ListType>())
        return tensorish(l->getElementType());
    return false;
}

/* The argument a c10d collective writes without saying so in its schema
 * (no alias info, no version bump), as gradtrace/_dist.py's
 * collective_writes: the first tensor argument of an in-place collective
 * (name ending in '_'), barriers aside. Its position, or -1. */
ptrdiff_t collective_writes(const c10::FunctionSchema &s)
{
    const std::string &n = s.name();
    if (n.rfind("c10d::", 0) != 0 || n.back() != '_' ||
        n.find("barrier") != std::string::npos)
        return -1;
    const auto &args = s.arguments();
    for (size_t i = 0; i < args.size(); i++) {
        if (args[i].alias_info())
            return -1;
        if (tensorish(args[i].type()))
            return (ptrdiff_t)i;
    }
    return -1;
}

/* Ops whose schema marks an argument written though they change none of
 * its elements (metadata, autograd state): never a kernel write. */
bool writes_no_element(const std::string &n)
{
#define GT__KW_NAME(op) op,
    static const char *const names[] = {GT_WRITES_NO_ELEMENT(GT__KW_NAME)};
#undef GT__KW_NAME
    for (const char *x : names)
        if (n == x)
            return true;
    return false;
}

/* The arguments of the kernel-write list's entry for op name n (overload
 * aside) in m.args: ARG_WRITTEN | ARG_UNMARKED | ARG_NOBUMP, and ARG_WHEN
 * with m.when when the entry names a condition. Returns whether any. */
bool set_kernel_writes(OpMeta &m, const c10::FunctionSchema &schema,
                       std::vector<uint8_t> &f)
{
    struct Entry {
        const char *op, *args, *when;
    };
#define GT__KW_ENTRY(op, args, when, reason) {op, args, when},
    static const Entry entries[] = {GT_KERNEL_WRITES(GT__KW_ENTRY)};
#undef GT__KW_ENTRY
    const auto &args = schema.arguments();
    bool any = false;
    for (const Entry &e : entries) {
        if (schema.name() != e.op)
            continue;
        for (size_t i = 0; i < args.size(); i++) {
            const std::string &a = args[i].name();
            if (e.when[0] && a == e.when &&
                args[i].type()->kind() == c10::TypeKind::BoolType)
                m.when = (int)i;
            std::string list = std::string(",") + e.args + ",";
            if (!args[i].alias_info() && tensorish(args[i].type()) &&
                list.find("," + a + ",") != std::string::npos)
                f[i] = ARG_WRITTEN | ARG_UNMARKED | ARG_NOBUMP, any = true;
        }
        if (e.when[0] && m.when < 0)
            return false; /* no such argument: the entry does not fit */
        if (e.when[0])
            for (auto &x : f)
                if (x & ARG_UNMARKED)
                    x |= ARG_WHEN;
    }
    return any;
}

/* m.args and m.schema_writes from the op's schema, every argument of it;
 * bump_free: the op has no ADInplaceOrView kernel (nothing bumps what it
 * writes but the kernel itself). */
void set_writes(OpMeta &m, const c10::FunctionSchema &schema, bool bump_free)
{
    const auto &args = schema.arguments();
    std::vector<uint8_t> f(args.size(), 0);
    bool any = false;
    for (size_t i = 0; i < args.size(); i++) {
        const auto *ai = args[i].alias_info();
        if (ai && ai->isWrite())
            f[i] = ARG_WRITTEN, any = true;
    }
    m.schema_writes = any;
    if (any && bump_free && !writes_no_element(schema.name()))
        for (auto &x : f)
            x |= x ? ARG_NOBUMP : 0;
    ptrdiff_t c = collective_writes(schema); /* never one the schema marks */
    if (c >= 0)
        f[(size_t)c] = ARG_WRITTEN | ARG_UNMARKED | ARG_NOBUMP, any = true;
    if (set_kernel_writes(m, schema, f))
        any = true;
    if (any)
        m.args = std::move(f);
}

/* The meta of every string-named record (RECORD_FUNCTION("detach"), the
 * engine's "autograd::engine::evaluate_function: MulBackward0" built anew
 * for each node it runs): no op, never recorded, so its name is not needed.
 * Returned without the lock: the same for all, read only. */
const OpMeta kNotOp{};

const OpMeta *op_meta_slow(const at::RecordFunction &fn, const char *key)
{
    if (fn.overload_name() == C->string_overload)
        return &kNotOp;
    std::lock_guard<std::mutex> g(C->mu);
    auto it = C->opmeta.find(key);
    if (it != C->opmeta.end())
        return it->second;
    auto schema = fn.operator_schema();
    if (!schema) {
        auto n = C->byname.find(fn.name());
        if (n != C->byname.end())
            return n->second;
    }
    C->metas.emplace_back();
    OpMeta *m = &C->metas.back();
    if (schema) {
        m->is_op = true;
        m->name = schema->name();
        if (!schema->overload_name().empty())
            m->name += "." + schema->overload_name();
        /* decomposed before the Python key (a dispatch mode never sees it):
         * the computed AutogradCPU entry is the math kernel */
        auto h = c10::Dispatcher::singleton().findOp(schema->operator_name());
        set_writes(*m, *schema,
                   h && !h->hasKernelForDispatchKey(c10::DispatchKey::ADInplaceOrView));
        if (h) {
            std::string table = h->dumpComputedTable();
            size_t p = table.find("\nAutogradCPU: ");
            if (p != std::string::npos) {
                size_t e = table.find('\n', p + 1);
                m->composite =
                    table.substr(p, e - p).find("[math kernel]") != std::string::npos;
            }
        }
        C->opmeta.emplace(key, m);
    } else {
        m->name = fn.name();
        C->byname.emplace(m->name, m);
    }
    return m;
}

inline const OpMeta *op_meta(Tls &t, const at::RecordFunction &fn)
{
    const char *key = fn.name();
    size_t h = (reinterpret_cast<uintptr_t>(key) >> 3) & (Tls::kCache - 1);
    for (size_t i = 0; i < 8; i++) {
        size_t j = (h + i) & (Tls::kCache - 1);
        if (t.ckey[j] == key)
            return t.cval[j];
        if (!t.ckey[j]) {
            const OpMeta *m = op_meta_slow(fn, key);
            if (m->is_op) {
                t.ckey[j] = key;
                t.cval[j] = m;
            }
            return m;
        }
    }
    return op_meta_slow(fn, key);
}

/* ---- saved tensors -------------------------------------------------------- */

/* The fingerprint (common/fingerprint.h, as the dispatch adapter takes
 * it) of CPU tensor x's own elements, in mode C->opts.check_saved, into
 * *hash. Returns the number of bytes read, -1 for a tensor whose bytes
 * cannot be read here (not on the CPU, no data) or with the check off. */
int64_t fingerprint(const at::TensorBase &x, uint64_t *hash)
{
    if (!x.defined())
        return -1;
    const c10::TensorImpl *d = data_of(x.unsafeGetTensorImpl());
    if (d->device_type() != c10::kCPU || !d->has_storage() || !geom_ok(d))
        return -1;
    int64_t item = (int64_t)d->itemsize();
    const char *base = static_cast<const char *>(d->storage().data());
    auto sizes = d->sizes();
    auto strides = d->strides();
    return gt_fp_view(base ? base + d->storage_offset() * item : nullptr, (size_t)item,
                      (int)sizes.size(), sizes.data(), strides.data(),
                      C->opts.check_saved, hash);
}

struct SavedVisitor {
    Tls *t;
    uint64_t node;
    uint64_t stamp;
    bool use = false; /* check_saved at the node's start: fingerprints only */
    void emit(const char *slot, const SavedVariable &sv)
    {
        if (sv.*kSvDefault)
            return; /* an optional slot never filled */
        const at::Tensor &data = sv.*kSvData;
        bool is_output = sv.*kSvIsOutput;
        if (use) {
            uint64_t h = 0;
            int64_t len = fingerprint(data, &h);
            if (len < 0)
                return;
            auto *u = reinterpret_cast<gt_cap_fp_use *>(
                reserve(*t, sizeof(gt_cap_fp_use), GT_CAP_FP_USE, stamp));
            if (!u)
                return;
            u->node = node;
            u->slot = slot;
            u->hashed = len;
            u->hash = h;
            return;
        }
        auto *r = reinterpret_cast<gt_cap_saved *>(
            reserve(*t, sizeof(gt_cap_saved), GT_CAP_SAVED, stamp));
        if (!r)
            return;
        r->node = node;
        r->slot = slot;
        r->saved_version = sv.*kSvSavedVersion;
        r->is_output = is_output;
        std::memset(r->pad, 0, sizeof r->pad);
        facts(data, r->t); /* undefined: hooks, or already released */
        r->t.ndim = 0;
        if (r->t.storage && !is_output && t->watch.size() < (1u << 20))
            t->watch.push_back(
                {c10::weak_intrusive_ptr<c10::TensorImpl>(
                     c10::intrusive_ptr<c10::TensorImpl>(data.getIntrusivePtr())),
                 r->t.storage});
        r->nbytes = data.defined() && r->t.storage ? r->t.nbytes : -1;
        r->hash = 0;
        r->hashed = C->opts.check_saved ? fingerprint(data, &r->hash) : -1;
    }
    void one(const char *slot, const SavedVariable &sv) { emit(slot, sv); }
    void vec(const char *slot, const std::vector<SavedVariable> &v)
    {
        for (size_t j = 0; j < v.size(); j++)
            emit(slot_at(slot, j), v[j]);
    }
    static const char *slot_at(const char *slot, size_t j);
};

/* "slot[j]", a string living as long as the capture (as the dispatch
 * adapter names an element of a saved list) */
const char *SavedVisitor::slot_at(const char *slot, size_t j)
{
    struct Key {
        const char *slot;
        size_t j;
        bool operator==(const Key &o) const { return slot == o.slot && j == o.j; }
    };
    struct Hash {
        size_t operator()(const Key &k) const
        {
            return std::hash<const void *>()(k.slot) * 31 + k.j;
        }
    };
    static thread_local std::unordered_map<Key, const char *, Hash> cache;
    static thread_local uint64_t cache_gen;
    if (cache_gen != C->gen) {
        cache.clear();
        cache_gen = C->gen;
    }
    auto it = cache.find(Key{slot, j});
    if (it != cache.end())
        return it->second;
    std::lock_guard<std::mutex> g(C->mu);
    C->names.push_back(std::string(slot) + "[" + std::to_string(j) + "]");
    const char *s = C->names.back().c_str();
    cache.emplace(Key{slot, j}, s);
    return s;
}

/* The Python class name of a custom autograd.Function's node
 * ("MyExpBackward"), interned per class; caller holds C->mu. */
const char *pynode_name(const Node *n, const char *dflt)
{
    const auto *pn = static_cast<const torch::autograd::PyNode *>(n);
    PyObject *o = gt_layout::pynode_object(pn);
    if (!o)
        return dflt;
    PyTypeObject *tp = Py_TYPE(o);
    static std::unordered_map<const void *, const char *> byclass;
    auto it = byclass.find(tp);
    if (it != byclass.end())
        return it->second;
    const char *nm = tp->tp_name ? tp->tp_name : dflt;
    const char *dot = std::strrchr(nm, '.');
    C->names.push_back(dot ? dot + 1 : nm);
    const char *s = C->names.back().c_str();
    byclass.emplace(tp, s);
    return s;
}

#include "saved_visitors.inc"

/* caller holds C->mu */
VisitorInfo &visitor_for(const Node *n)
{
    const void *vt = *reinterpret_cast<void *const *>(n);
    auto it = C->vtmap.find(vt);
    if (it != C->vtmap.end())
        return it->second;
    const char *mangled = typeid(*n).name();
    VisitorInfo vi;
    auto b = C->genmap.find(mangled);
    if (b != C->genmap.end())
        vi = b->second;
    /* typeinfo of these is not exported: compare mangled names */
    else if (!std::strcmp(mangled, "N5torch8autograd14AccumulateGradE"))
        vi.kind = V_ACC;
    else if (!std::strcmp(mangled, "N5torch8autograd10CopySlicesE"))
        vi.kind = V_COPYSLICES;
    else if (!std::strcmp(mangled, "N5torch8autograd6PyNodeE"))
        vi.kind = V_PYNODE;
    std::string name = n->name();
    if (name.rfind("torch::autograd::", 0) == 0)
        name = name.substr(17); /* AccumulateGrad, CopySlices: their Python names */
    C->names.push_back(name);
    vi.name = C->names.back().c_str();
    return C->vtmap.emplace(vt, vi).first->second;
}

/* ---- nodes ----------------------------------------------------------------- */

inline size_t nhash(const Node *n, size_t mask)
{
    return (reinterpret_cast<uintptr_t>(n) >> 4) * 0x9E3779B97F4A7C15ull >> 20 & mask;
}

/* Node table entry of n (caller holds C->nmu). A node is the same node while
 * its address, sequence number and forward thread are; AccumulateGrad (no
 * sequence number) is held by a weak reference so its address stays its own.
 * *is_new: inserted now. */
uint64_t node_lookup(const Node *n, bool acc, bool insert, bool *is_new)
{
    if (insert && (C->nused + 1) * 2 >= C->ntab.size()) {
        std::vector<NodeEnt> old;
        old.swap(C->ntab);
        size_t keep = 0;
        for (auto &e : old)
            keep += e.key && e.weak.alive();
        size_t cap = 4096;
        while (cap < keep * 4)
            cap *= 2;
        C->ntab.resize(cap);
        C->nused = 0;
        for (auto &e : old) {
            if (!e.key || !e.weak.alive())
                continue;
            size_t j = nhash(e.key, cap - 1);
            while (C->ntab[j].key)
                j = (j + 1) & (cap - 1);
            C->ntab[j] = std::move(e);
            C->nused++;
        }
    }
    if (C->ntab.empty())
        return 0;
    size_t mask = C->ntab.size() - 1;
    size_t j = nhash(n, mask);
    uint64_t snr = n->sequence_nr(), th = n->thread_id();
    while (C->ntab[j].key) {
        NodeEnt &e = C->ntab[j];
        if (e.key == n) {
            if (e.seqnr == snr && e.thread == th && e.weak.alive()) {
                if (is_new)
                    *is_new = false;
                return e.id;
            }
            if (!insert)
                return 0;
            e.seqnr = snr;
            e.thread = th;
            e.id = ++C->next_node;
            if (acc)
                e.weak.hold(n);
            else
                e.weak.clear();
            if (is_new)
                *is_new = true;
            return e.id;
        }
        j = (j + 1) & mask;
    }
    if (!insert)
        return 0;
    NodeEnt &e = C->ntab[j];
    e.key = n;
    e.seqnr = snr;
    e.thread = th;
    e.id = ++C->next_node;
    if (acc)
        e.weak.hold(n);
    C->nused++;
    if (is_new)
        *is_new = true;
    return e.id;
}

void write_saved(Tls &t, const Node *n, VisitorInfo vi, uint64_t id, uint64_t stamp,
                 bool use = false)
{
    SavedVisitor sv{&t, id, stamp, use};
    if (vi.kind == V_COPYSLICES) {
        const auto *cs = static_cast<const torch::autograd::CopySlices *>(n);
        if (!cs->fn)
            return;
        VisitorInfo fv;
        {
            std::lock_guard<std::mutex> g(C->mu);
            fv = visitor_for(cs->fn.get());
        }
        if (fv.kind == V_GEN)
            fv.fn(cs->fn.get(), sv); /* the wrapped node's, on the CopySlices */
    } else if (vi.kind == V_GEN) {
        vi.fn(n, sv);
    } else if (vi.kind == V_PYNODE) {
        const auto *pn = static_cast<const torch::autograd::PyNode *>(n);
        auto *f = reinterpret_cast<THPFunction *>(gt_layout::pynode_object(pn));
        if (f)
            sv.vec("saved_tensors", f->saved_variables);
    }
}

/* Name root and every node reachable from it not named yet, writing their
 * records. Returns root's id. */
uint64_t record_new_nodes(Tls &t, const Node *root, uint64_t stamp,
                          bool *root_new = nullptr, bool of_op = false)
{
    std::vector<Tls::Work> &work = t.work;
    std::vector<gt_cap_edge> &edges = t.edges;
    uint64_t root_id;
    work.clear();
    {
        std::lock_guard<std::mutex> g(C->mu);
        VisitorInfo &vi = visitor_for(root);
        std::lock_guard<std::mutex> gn(C->nmu);
        bool is_new = false;
        root_id = node_lookup(root, vi.kind == V_ACC, true, &is_new);
        if (root_new)
            *root_new = is_new;
        if (!is_new)
            return root_id;
        work.push_back({root, root_id});
    }
    while (!work.empty()) {
        Tls::Work w = work.back();
        work.pop_back();
        VisitorInfo vi;
        edges.clear();
        {
            std::lock_guard<std::mutex> g(C->mu);
            vi = visitor_for(w.n);
            if (vi.kind == V_PYNODE)
                vi.name = pynode_name(w.n, vi.name);
            std::lock_guard<std::mutex> gn(C->nmu);
            for (const auto &e : w.n->next_edges()) {
                gt_cap_edge re{0, e.input_nr, 0};
                if (e.function) {
                    const Node *x = e.function.get();
                    VisitorInfo &xv = visitor_for(x);
                    bool is_new = false;
                    re.next = node_lookup(x, xv.kind == V_ACC, true, &is_new);
                    if (is_new)
                        work.push_back({x, re.next});
                }
                edges.push_back(re);
            }
        }
        size_t ne = std::min<size_t>(edges.size(), GT_CAP_EDGES_MAX);
        size_t len = sizeof(gt_cap_node) + ne * sizeof(gt_cap_edge);
        auto *r = reinterpret_cast<gt_cap_node *>(reserve(t, len, GT_CAP_NODE, stamp));
        if (!r)
            continue;
        if (of_op && w.n == root)
            r->h.flags = GT_CAP_NODEF_OF_OP;
        r->id = w.id;
        r->name = vi.name;
        r->sequence_nr = vi.kind == V_ACC ? -1 : (int64_t)w.n->sequence_nr();
        r->os_tid = (int64_t)w.n->thread_id();
        r->variable_impl = r->variable_vc = nullptr;
        if (vi.kind == V_ACC) {
            const auto &v =
                static_cast<const torch::autograd::AccumulateGrad *>(w.n)->variable;
            if (v.defined()) {
                r->variable_impl = v.unsafeGetTensorImpl();
                r->variable_vc = vc_ptr(v.unsafeGetTensorImpl()->version_counter());
            }
        }
        r->nedges = (uint32_t)ne;
        r->pad = 0;
        if (ne)
            std::memcpy(r + 1, edges.data(), ne * sizeof(gt_cap_edge));
        /* a node may have any number of edges (cat, stack of many tensors) */
        for (size_t first = ne; first < edges.size();) {
            size_t n = std::min<size_t>(edges.size() - first, GT_CAP_EDGES_MAX);
            auto *x = reinterpret_cast<gt_cap_edges *>(reserve(
                t, sizeof(gt_cap_edges) + n * sizeof(gt_cap_edge), GT_CAP_EDGES, stamp));
            if (!x)
                break;
            x->node = w.id;
            x->first = (uint32_t)first;
            x->n = (uint32_t)n;
            std::memcpy(x + 1, edges.data() + first, n * sizeof(gt_cap_edge));
            first += n;
        }
        write_saved(t, w.n, vi, w.id, stamp);
    }
    return root_id;
}

void check_grad_fn(Tls &t, const at::Tensor &x, uint64_t stamp)
{
    if (!x.defined())
        return;
    auto *am = x.unsafeGetTensorImpl()->autograd_meta();
    if (!am)
        return;
    const Node *n = static_cast<torch::autograd::AutogradMeta *>(am)->grad_fn_.get();
    if (!n)
        return;
    bool is_new = false;
    uint64_t id = record_new_nodes(t, n, stamp, &is_new, true);
    if (!id || !is_new)
        return; /* its outputs were written when it was named */
    auto *r = reinterpret_cast<gt_cap_node_out *>(
        reserve(t, sizeof(gt_cap_node_out), GT_CAP_NODE_OUT, stamp));
    if (!r)
        return;
    r->node = id;
    r->impl = x.unsafeGetTensorImpl();
    r->vc = vc_ptr(x.unsafeGetTensorImpl()->version_counter());
    r->output_nr = x.output_nr();
    r->pad = 0;
}

/* ---- callbacks ------------------------------------------------------------ */

/* An in-place op on a leaf that requires grad (or on a view of one), in
 * grad mode: autograd refuses it before it reaches the kernels below, so a
 * dispatch mode never sees it and the inspector reports the raising line as
 * the attempted write. Not recorded either. */
bool refused_by_autograd(const at::RecordFunction &fn, const OpMeta *m, bool grad_mode)
{
    if (!grad_mode)
        return false;
    auto in = fn.inputs();
    bool refused = false;
    for (size_t i = 0; i < in.size() && !refused; i++) {
        if ((m->arg(i) & (ARG_WRITTEN | ARG_UNMARKED)) != ARG_WRITTEN)
            continue; /* not written, or not as its schema says */
        each_tensor(in[i], [&](const at::Tensor &x) {
            if (!x.defined() || refused)
                return;
            if (x.requires_grad() && x.is_leaf())
                refused = true;
            else if (x.is_view()) {
                const at::TensorBase &b = x._base();
                refused = b.defined() && b.requires_grad() && b.is_leaf();
            }
        });
    }
    return refused;
}

/* TorchDynamo and AOTAutograd trace a compiled function on fake tensors
 * (FakeTensorMode, make_fx's proxy mode): those ops compute nothing and are
 * not recorded; the compiled code's own ops are, when it runs. */
inline bool tracing(const Tls &t)
{
    using c10::impl::TorchDispatchModeKey;
    const auto &m = t.modes->*kModesInfra;
    return m[static_cast<size_t>(TorchDispatchModeKey::FAKE)].has_value() ||
           m[static_cast<size_t>(TorchDispatchModeKey::PROXY)].has_value();
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn)
{
    Tls *tp = tls();
    if (!tp)
        return nullptr;
    Tls &t = *tp;
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
        t.bwd_depth++;
        t.exec_stack.push_back(t.exec_pending);
        t.exec_pending = 0;
        if (t.busy || !C->active.load(std::memory_order_relaxed))
            return nullptr;
        /* written at the node's first recorded op: a node that runs no op
         * (an AccumulateGrad moving the gradient into .grad) is not shown,
         * as under the dispatch adapter */
        auto cur = torch::autograd::get_current_node();
        if (cur) {
            std::lock_guard<std::mutex> g(C->nmu);
            t.exec_pending = node_lookup(cur.get(), false, false, nullptr);
        }
        if (cur && t.exec_pending && C->opts.check_saved) {
            /* the bytes of what it saved, as it starts to read them */
            VisitorInfo vi;
            {
                std::lock_guard<std::mutex> g(C->mu);
                vi = visitor_for(cur.get());
            }
            uint64_t stamp = t.last_stamp =
                C->stamp.fetch_add(1, std::memory_order_relaxed) + 1;
            write_saved(t, cur.get(), vi, t.exec_pending, stamp, true);
            t.publish();
        }
        return nullptr;
    }
    Frame fr{0, 0, (uint32_t)t.vvs.size(), (uint32_t)t.written.size(), 0};
    /* an op inside a recorded one is not recorded: no need of its meta */
    if (t.busy || t.vis_depth > 0 || !C->active.load(std::memory_order_relaxed)) {
        t.frames.push_back(fr);
        return nullptr;
    }
    const OpMeta *m = op_meta(t, fn);
    bool grad_mode = t.autograd->get_grad_mode();
    /* ops run with the Python key excluded (inside torch.tensor(...), a
     * mode's own dispatch) are invisible to a dispatch mode: not recorded */
    if (m->is_op && !m->composite && !t.keys->excluded().has(c10::DispatchKey::Python) &&
        !(m->schema_writes && refused_by_autograd(fn, m, grad_mode)) && !tracing(t)) {
        fr.recorded = 1;
        uint32_t stack = 0;
        if (C->opts.stack_key) {
            t.busy = true;
            stack = C->opts.stack_key();
            t.busy = false;
        }
        fr.stack = stack;
        fr.stamp = t.last_stamp = C->stamp.fetch_add(1, std::memory_order_relaxed) + 1;
        for (auto &w : t.fresh) {
            auto p = w.lock();
            if (!p || !p->requires_grad())
                continue;
            auto *x = reinterpret_cast<gt_cap_refresh *>(
                reserve(t, sizeof(gt_cap_refresh), GT_CAP_REFRESH, fr.stamp));
            if (!x)
                continue;
            x->impl = p.get();
            x->vc = vc_ptr(p->version_counter());
            auto *am = static_cast<torch::autograd::AutogradMeta *>(p->autograd_meta());
            x->flags = GT_CAPT_REQGRAD | (am && am->grad_fn_ ? 0 : GT_CAPT_LEAF);
            std::memset(x->pad, 0, sizeof x->pad);
        }
        t.fresh.clear();
        if (t.exec_pending) {
            auto *x = reinterpret_cast<gt_cap_exec *>(
                reserve(t, sizeof(gt_cap_exec), GT_CAP_EXEC, fr.stamp));
            if (x)
                x->node = t.exec_pending;
            t.exec_pending = 0;
        }
        auto *r = reinterpret_cast<gt_cap_op *>(
            reserve(t, sizeof(gt_cap_op), GT_CAP_OP, fr.stamp));
        if (r) {
            r->name = m->name.c_str();
            r->os_tid = t.lane->os_tid;
            r->stack = stack;
            r->grad_mode = grad_mode;
            r->in_backward =
                t.bwd_depth > 0 || C->in_backward.load(std::memory_order_relaxed) > 0;
            r->pad[0] = r->pad[1] = 0;
        }
        auto in = fn.inputs();
        /* a write of the kernel-write list only happens with its condition */
        bool when = m->when < 0 || ((size_t)m->when < in.size() && in[m->when].isBool() &&
                                    in[m->when].toBool());
        for (size_t i = 0; i < in.size(); i++) {
            uint8_t a = m->arg(i);
            if ((a & ARG_WHEN) && !when)
                a = 0;
            bool w = a & ARG_WRITTEN;
            each_tensor(in[i], [&](const at::Tensor &x) {
                put_arg(t, GT_CAP_IN, (int)i, x, fr.stamp, w, a & ARG_UNMARKED,
                        a & ARG_NOBUMP);
                /* keep the counter to read its value after the op */
                t.vvs.push_back(
                    x.defined() ? x.unsafeGetTensorImpl()->version_counter()
                                : c10::VariableVersion(c10::VariableVersion::DISABLED));
                if (w && x.defined())
                    t.written.emplace_back(
                        c10::intrusive_ptr<c10::TensorImpl>(x.getIntrusivePtr()));
            });
        }
        t.vis_depth++;
        t.publish();
    }
    t.frames.push_back(fr);
    return nullptr;
}

void on_end(const at::RecordFunction &fn, at::ObserverContext *)
{
    Tls *tp = tls();
    if (!tp)
        return;
    Tls &t = *tp;
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
        t.bwd_depth--;
        t.exec_pending = 0;
        if (!t.exec_stack.empty()) {
            t.exec_pending = t.exec_stack.back();
            t.exec_stack.pop_back();
        }
        return;
    }
    if (t.frames.empty())
        return;
    Frame fr = t.frames.back();
    t.frames.pop_back();
    if (!fr.recorded) {
        if (C10_UNLIKELY(t.vvs.size() != fr.vv_begin))
            t.vvs.resize(fr.vv_begin);
        if (C10_UNLIKELY(t.written.size() != fr.wk_begin))
            t.written.erase(t.written.begin() + fr.wk_begin, t.written.end());
        return;
    }
    t.vis_depth--;
    /* the versions in records of at most GT_CAP_VERS_MAX: GT_CAP_VERS
     * ones, then the GT_CAP_END (an op may take any number of tensors);
     * an op ending by an exception (RecordFunction ends as it unwinds) may
     * have written nothing */
    size_t total = t.vvs.size() - fr.vv_begin, first = 0;
    uint16_t raised = std::uncaught_exceptions() > 0 ? GT_CAP_ENDF_RAISED : 0;
    do {
        uint32_t n = (uint32_t)std::min<size_t>(total - first, GT_CAP_VERS_MAX);
        bool last = first + n == total;
        size_t len = pad8(sizeof(gt_cap_end) + 4 * (size_t)n);
        auto *r = reinterpret_cast<gt_cap_end *>(
            reserve(t, len, last ? GT_CAP_END : GT_CAP_VERS, fr.stamp));
        if (r) {
            r->h.flags |= raised;
            r->n = n;
            r->first = (uint32_t)first;
            uint32_t *v = reinterpret_cast<uint32_t *>(r + 1);
            for (uint32_t i = 0; i < n; i++) {
                const auto &vv = t.vvs[fr.vv_begin + first + i];
                v[i] = vv.enabled() ? vv.current_version() : UINT32_MAX;
            }
        }
        first += n;
    } while (first < total);
    t.vvs.resize(fr.vv_begin);
    const auto &outs = fn.outputs();
    int pos = 0;
    for (const auto &o : outs)
        each_tensor(o, [&](const at::Tensor &x) {
            put_arg(t, GT_CAP_OUT, pos++, x, fr.stamp, false);
            if (x.defined() && !x.requires_grad() && t.fresh.size() < 16)
                t.fresh.emplace_back(
                    c10::intrusive_ptr<c10::TensorImpl>(x.getIntrusivePtr()));
        });
    if (t.autograd->get_grad_mode()) {
        /* new nodes hang off the outputs, and off written inputs (an
         * in-place op with no return, like _foreach_add_) */
        t.busy = true;
        for (const auto &o : outs)
            each_tensor(o, [&](const at::Tensor &x) { check_grad_fn(t, x, fr.stamp); });
        for (size_t i = fr.wk_begin; i < t.written.size(); i++) {
            auto p = t.written[i].lock();
            if (!p)
                continue;
            at::Tensor x(std::move(p));
            check_grad_fn(t, x, fr.stamp);
            /* an in-place op on a view gives its base a CopySlices */
            if (x.is_view())
                check_grad_fn(t, at::Tensor(x._base()), fr.stamp);
        }
        t.busy = false;
    }
    if (C->opts.names && fr.stack && t.written.size() > fr.wk_begin) {
        /* the user's names for what the op wrote (and for its base) */
        t.busy = true;
        for (size_t i = fr.wk_begin; i < t.written.size(); i++) {
            auto p = t.written[i].lock();
            if (!p)
                continue;
            at::Tensor x(std::move(p));
            gt_cap_tensor a, b;
            facts(x, a);
            bool view = x.is_view();
            if (view)
                facts(x._base(), b);
            t.publish();
            C->opts.names(fr.stack, &a, view ? &b : nullptr);
        }
        t.busy = false;
    }
    t.written.erase(t.written.begin() + fr.wk_begin, t.written.end());
    t.publish();
}

/* The tensors of a Python object (nested tuples and lists, GIL held). */
template <class F> void each_pytensor(PyObject *v, F &&f, int depth = 0)
{
    if (THPVariable_Check(v)) {
        f(THPVariable_Unpack(v));
        return;
    }
    if ((!PyTuple_Check(v) && !PyList_Check(v)) || depth >= 8)
        return;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    for (Py_ssize_t i = 0; i < n; i++)
        each_pytensor(PySequence_Fast_GET_ITEM(v, i), f, depth + 1);
}

} // namespace

/* ---- C API -------------------------------------------------------------------- */

extern "C" {

const char *gt_capture_built_for(void)
{
    return TORCH_VERSION;
}

static void init_cap()
{
    if (C)
        return;
    C = new Cap();
    C->gen = ++g_gen;
    at::RecordFunction probe(at::RecordScope::USER_SCOPE);
    C->string_overload = probe.overload_name();
    for (const auto &g : kGenVisitors) {
        VisitorInfo vi;
        vi.kind = V_GEN;
        vi.name = g.name;
        vi.fn = g.fn;
        C->genmap.emplace(g.mangled, vi);
    }
}

static int fail(char *errbuf, size_t errlen, const std::string &msg)
{
    if (errbuf && errlen)
        std::snprintf(errbuf, errlen, "%s", msg.c_str());
    return -1;
}

int gt_capture_selftest(const char *running, char *errbuf, size_t errlen)
{
    const char *force = std::getenv("GRADTRACE_ENGINE_SELFTEST");
    if (force && !std::strcmp(force, "fail"))
        return fail(errbuf, errlen,
                    "self-test forced to fail (GRADTRACE_ENGINE_SELFTEST=fail)");
    std::string base = running ? running : "";
    base = base.substr(0, base.find('+')); /* 2.13.0+cpu: a build of 2.13.0 */
    if (base != TORCH_VERSION)
        return fail(errbuf, errlen,
                    std::string("built for torch ") + TORCH_VERSION + ", running " +
                        (running ? running : "?"));
    try {
        init_cap();
        /* a tiny graph whose saved tensors and versions are known */
        at::AutoGradMode grad(true);
        auto a = at::ones({3}).set_requires_grad(true);
        auto b0 = at::ones({3}).set_requires_grad(true);
        auto b = b0 * 2;
        auto ver = [](const at::Tensor &x) {
            return x.unsafeGetTensorImpl()->version_counter().current_version();
        };
        uint32_t vb = ver(b);
        b.add_(1);        /* one bump */
        auto c = a * b;   /* MulBackward0 saves self (a, v0) and other (b, v1) */
        auto d = c.exp(); /* ExpBackward0 saves result (c's output, v0) */
        auto bd = b.detach();
        if (vc_ptr(bd.unsafeGetTensorImpl()->version_counter()) !=
                vc_ptr(b.unsafeGetTensorImpl()->version_counter()) ||
            vc_ptr(a.unsafeGetTensorImpl()->version_counter()) ==
                vc_ptr(b.unsafeGetTensorImpl()->version_counter()))
            return fail(errbuf, errlen, "version counter layout check failed");
        /* the dispatch modes as the shim reads them in place */
        const TorchDispatchModeTLS &modes = TorchDispatchModeTLS::get_state();
        bool modes_ok =
            (int64_t)(modes.*kModesStack).size() == TorchDispatchModeTLS::stack_len();
        for (size_t k = 0; k < (modes.*kModesInfra).size(); k++)
            modes_ok =
                modes_ok && (modes.*kModesInfra)[k].has_value() ==
                                TorchDispatchModeTLS::get_mode(
                                    static_cast<c10::impl::TorchDispatchModeKey>(k))
                                    .has_value();
        if (!modes_ok)
            return fail(errbuf, errlen, "dispatch mode state layout check failed");
        const Node *mul = torch::autograd::impl::grad_fn_unsafe(c);
        const Node *exp = torch::autograd::impl::grad_fn_unsafe(d);
        VisitorInfo vm, ve;
        {
            std::lock_guard<std::mutex> g(C->mu);
            vm = visitor_for(mul);
            ve = visitor_for(exp);
        }
        if (vm.kind != V_GEN || ve.kind != V_GEN ||
            std::strcmp(vm.name, "MulBackward0") || std::strcmp(ve.name, "ExpBackward0"))
            return fail(errbuf, errlen, "generated node classes not recognised");
        struct Probe {
            std::string slot;
            uint32_t version;
            bool out;
            const void *vc;
        };
        std::vector<Probe> got;
        const auto *mb =
            static_cast<const torch::autograd::generated::MulBackward0 *>(mul);
        const auto *eb =
            static_cast<const torch::autograd::generated::ExpBackward0 *>(exp);
        auto rd = [&](const char *slot, const SavedVariable &sv) {
            const at::Tensor &data = sv.*kSvData;
            got.push_back({slot, sv.*kSvSavedVersion, sv.*kSvIsOutput,
                           data.defined()
                               ? vc_ptr(data.unsafeGetTensorImpl()->version_counter())
                               : nullptr});
        };
        SavedVariable unfilled;
        if (!(unfilled.*kSvDefault) || mb->self_.*kSvDefault || eb->result_.*kSvDefault)
            return fail(errbuf, errlen, "saved variable layout check failed");
        rd("self", mb->self_);
        rd("other", mb->other_);
        rd("result", eb->result_);
        auto vcof = [](const at::Tensor &x) {
            return vc_ptr(x.unsafeGetTensorImpl()->version_counter());
        };
        if (got[0].version != ver(a) || got[0].out || got[0].vc != vcof(a) ||
            got[1].version != vb + 1 || got[1].version != ver(b) || got[1].out ||
            got[1].vc != vcof(b) || got[2].version != ver(d) || !got[2].out ||
            got[2].vc != vcof(d)) {
            char detail[160];
            std::snprintf(detail, sizeof detail,
                          " (self v%u/%d/%d, other v%u/%d/%d, result v%u/%d/%d)",
                          got[0].version, got[0].out, got[0].vc == vcof(a),
                          got[1].version, got[1].out, got[1].vc == vcof(b),
                          got[2].version, got[2].out, got[2].vc == vcof(d));
            return fail(errbuf, errlen,
                        std::string("saved tensors read back wrong") + detail);
        }
    } catch (const std::exception &e) {
        return fail(errbuf, errlen, std::string("self-test raised: ") + e.what());
    }
    return 0;
}

int gt_capture_start(const gt_capture_opts *opts, char *errbuf, size_t errlen)
{
    try {
        init_cap();
        if (C->on)
            return fail(errbuf, errlen, "a capture is already on");
        if (C->lanes.load())
            return fail(errbuf, errlen, "the previous capture was not released");
        C->opts = opts ? *opts : gt_capture_opts{};
        C->active = true;
        C->in_backward = 0;
        at::RecordFunctionCallback cb(&on_start, &on_end);
        cb.needsInputs(true).needsOutputs(true);
        cb.scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION});
        C->handle = C->opts.all_threads ? at::addGlobalCallback(cb)
                                        : at::addThreadLocalCallback(cb);
        C->on = true;
    } catch (const std::exception &e) {
        return fail(errbuf, errlen, std::string("cannot start: ") + e.what());
    }
    return 0;
}

void gt_capture_stop(void)
{
    if (!C || !C->on)
        return;
    at::removeCallback(C->handle);
    C->on = false;
    Tls &t = t_tls;
    if (t.gen == C->gen)
        t.publish();
}

gt_cap_lane *gt_capture_lanes(void)
{
    return C ? C->lanes.load(std::memory_order_acquire) : nullptr;
}

int gt_capture_weak_alive(const void *impl)
{
    auto *t = static_cast<c10::intrusive_ptr_target *>(
        const_cast<c10::TensorImpl *>(static_cast<const c10::TensorImpl *>(impl)));
    return c10::raw::weak_intrusive_ptr::use_count(t) > 0;
}

int gt_capture_weak_forgettable(const void *impl)
{
    auto *t = static_cast<c10::intrusive_ptr_target *>(
        const_cast<c10::TensorImpl *>(static_cast<const c10::TensorImpl *>(impl)));
    auto w = c10::weak_intrusive_ptr<c10::intrusive_ptr_target>::reclaim(t);
    bool r = w.use_count() == 0 && w.weak_use_count() == 1;
    w.release();
    return r;
}

void gt_capture_forget(const void *impl)
{
    if (!C)
        return;
    Tls *t = tls();
    if (!t)
        return;
    auto same = [impl](const c10::weak_intrusive_ptr<c10::TensorImpl> &w) {
        return w._unsafe_get_target() == impl;
    };
    t->fresh.erase(std::remove_if(t->fresh.begin(), t->fresh.end(), same),
                   t->fresh.end());
    t->watch.erase(std::remove_if(t->watch.begin(), t->watch.end(),
                                  [&](const Tls::Watch &w) { return same(w.t); }),
                   t->watch.end());
}

void gt_capture_weak_release(const void *impl)
{
    auto *t = static_cast<c10::intrusive_ptr_target *>(
        const_cast<c10::TensorImpl *>(static_cast<const c10::TensorImpl *>(impl)));
    c10::raw::weak_intrusive_ptr::decref(t);
}

void gt_capture_recycle(gt_cap_lane *lane, gt_cap_chunk *c)
{
    uint64_t tail = __atomic_load_n(&lane->ring_tail, __ATOMIC_RELAXED);
    uint64_t head = __atomic_load_n(&lane->ring_head, __ATOMIC_ACQUIRE);
    if (tail - head >= GT_CAP_RING || __atomic_load_n(&lane->retired, __ATOMIC_ACQUIRE)) {
        std::free(c);
        return;
    }
    lane->ring[tail % GT_CAP_RING] = c;
    __atomic_store_n(&lane->ring_tail, tail + 1, __ATOMIC_RELEASE);
}

void gt_capture_release(void)
{
    if (!C || C->on)
        return;
    gt_cap_lane *l = C->lanes.load();
    while (l) {
        gt_cap_lane *nx = l->next_lane;
        gt_cap_chunk *c = l->read;
        while (c) {
            gt_cap_chunk *n = c->next;
            std::free(c);
            c = n;
        }
        for (uint64_t i = l->ring_head; i < l->ring_tail; i++)
            std::free(l->ring[i % GT_CAP_RING]);
        std::free(l);
        l = nx;
    }
    C->lanes.store(nullptr);
    C->lanes_tail = nullptr;
    C->gen = ++g_gen; /* every thread's Tls starts over */
    std::lock_guard<std::mutex> g(C->nmu);
    C->ntab.clear();
    C->nused = 0;
}

void gt_capture_set_active(int on)
{
    if (C)
        C->active = on != 0;
}

void gt_capture_forked(void)
{
    if (!C)
        return;
    if (C->on)
        at::removeCallback(C->handle);
    C->on = false;
    /* the lanes belong to the parent's consumer: leak them here */
    C->lanes.store(nullptr);
    C->lanes_tail = nullptr;
    C->gen = ++g_gen;
}

int gt_capture_pytensor(void *pyobj, gt_cap_tensor *out, const void **grad_fn)
{
    PyObject *o = static_cast<PyObject *>(pyobj);
    if (!THPVariable_Check(o))
        return -1;
    const at::Tensor &x = THPVariable_Unpack(o);
    facts(x, *out);
    out->ndim = 0;
    if (grad_fn)
        *grad_fn = x.defined() ? torch::autograd::impl::grad_fn_unsafe(x) : nullptr;
    return 0;
}

void *gt_capture_reserve(int type, size_t len)
{
    if (!C || !C->on)
        return nullptr;
    Tls *t = tls();
    if (!t)
        return nullptr;
    t->last_stamp = C->stamp.fetch_add(1, std::memory_order_relaxed) + 1;
    return reserve(*t, pad8(len), type, t->last_stamp);
}

void gt_capture_commit(void)
{
    if (!C || !C->on)
        return;
    Tls *t = tls();
    if (t)
        t->publish();
}

uint64_t gt_capture_node_id(const void *node)
{
    if (!C || !node)
        return 0;
    const Node *n = static_cast<const Node *>(node);
    Tls *t = tls();
    if (!t)
        return 0;
    /* a root's grad_fn is named at the op that made it; name it now if that
     * op was not recorded (created before recording, or outside a window) */
    bool busy = t->busy;
    t->busy = true;
    uint64_t id = record_new_nodes(*t, n, t->last_stamp);
    t->busy = busy;
    return id;
}

uint64_t gt_capture_call_begin(const char *name, uint32_t stack, int region, void *args)
{
    if (!C || !C->on || !C->active.load(std::memory_order_relaxed))
        return 0;
    Tls *tp = tls();
    /* inside a recorded op (a torch.library custom op whose autograd
     * formula runs an autograd.Function): the op encloses the call, as it
     * encloses the ops inside it; its node hangs off the op's outputs */
    if (!tp || tp->busy || tp->vis_depth > 0)
        return 0;
    Tls &t = *tp;
    uint64_t stamp = t.last_stamp = C->stamp.fetch_add(1, std::memory_order_relaxed) + 1;
    auto *r =
        reinterpret_cast<gt_cap_op *>(reserve(t, sizeof(gt_cap_op), GT_CAP_OP, stamp));
    if (!r)
        return 0;
    r->h.flags = GT_CAP_OPF_CALL | (region ? GT_CAP_OPF_REGION : 0);
    r->name = name;
    r->os_tid = t.lane->os_tid;
    r->stack = stack;
    r->grad_mode = c10::GradMode::is_enabled();
    r->in_backward =
        t.bwd_depth > 0 || C->in_backward.load(std::memory_order_relaxed) > 0;
    r->pad[0] = r->pad[1] = 0;
    int pos = 0;
    if (args)
        each_pytensor(static_cast<PyObject *>(args), [&](const at::Tensor &x) {
            put_arg(t, GT_CAP_IN, pos++, x, stamp, false);
        });
    t.publish();
    return stamp;
}

void gt_capture_call_end(uint64_t call, void *result)
{
    if (!C || !C->on || !call)
        return;
    Tls *tp = tls();
    if (!tp)
        return;
    Tls &t = *tp;
    uint64_t stamp = t.last_stamp = C->stamp.fetch_add(1, std::memory_order_relaxed) + 1;
    auto *r = reinterpret_cast<gt_cap_call_end *>(
        reserve(t, sizeof(gt_cap_call_end), GT_CAP_CALL_END, stamp));
    if (r)
        r->call = call;
    if (result && r) {
        bool busy = t.busy;
        t.busy = true;
        int pos = 0;
        try {
            /* the custom Function's node is complete now, before anything
             * can change what it saved */
            each_pytensor(static_cast<PyObject *>(result), [&](const at::Tensor &x) {
                put_arg(t, GT_CAP_OUT, pos++, x, stamp, false);
                check_grad_fn(t, x, stamp);
            });
        } catch (const std::exception &) {
        }
        t.busy = busy;
    }
    auto *p = reinterpret_cast<gt_cap_call_end *>(
        reserve(t, sizeof(gt_cap_call_end), GT_CAP_CALL_POP, stamp));
    if (p)
        p->call = call;
    t.publish();
}

void gt_capture_check_saved(void)
{
    if (!C || !C->on)
        return;
    Tls *tp = tls();
    if (!tp)
        return;
    Tls &t = *tp;
    size_t keep = 0;
    /* A tensor saved again (a parameter, every step) is watched once: after
     * the check every live entry of it holds the current storage, so the
     * later entries say nothing the first does not, and without this the
     * list grows by the saved parameters each step and the check with it. */
    t.watch_seen.clear();
    for (size_t i = 0; i < t.watch.size(); i++) {
        auto p = t.watch[i].t.lock();
        if (!p)
            continue; /* died: forgotten */
        bool again = !t.watch_seen.insert(p.get()).second;
        const c10::StorageImpl *st =
            p->has_storage() ? p->storage().unsafeGetStorageImpl() : nullptr;
        if (st && st != t.watch[i].storage) {
            at::Tensor x(p);
            gt_cap_tensor f;
            facts(x, f);
            f.ndim = 0;
            auto *r = static_cast<gt_cap_bwd_tensor *>(
                gt_capture_reserve(GT_CAP_SWAP_SEEN, sizeof(gt_cap_bwd_tensor)));
            if (r) {
                r->pos = 0;
                r->pad = 0;
                r->node = nullptr;
                r->t = f;
            }
            t.watch[i].storage = st;
        }
        if (again)
            continue;
        if (keep != i)
            t.watch[keep] = std::move(t.watch[i]);
        keep++;
    }
    t.watch.erase(t.watch.begin() + (std::ptrdiff_t)keep, t.watch.end());
    t.publish();
}

int gt_capture_schema_writes(const char *schema, char *out, size_t outlen)
{
    try {
        c10::FunctionSchema s = torch::jit::parseSchema(schema);
        OpMeta m;
        set_writes(m, s, false);
        size_t n = s.arguments().size();
        if (n >= outlen)
            return -1;
        for (size_t i = 0; i < n; i++)
            out[i] = !m.arg(i) ? '.' : m.arg(i) & ARG_UNMARKED ? 'u' : 'w';
        out[n] = 0;
        return (int)n;
    } catch (...) {
        return -1;
    }
}

int gt_capture_wrapper_check(void *wrapper, void *inner)
{
    PyObject *w = static_cast<PyObject *>(wrapper), *in = static_cast<PyObject *>(inner);
    if (!THPVariable_Check(w) || !THPVariable_Check(in))
        return -1;
    const c10::TensorImpl *wi = THPVariable_Unpack(w).unsafeGetTensorImpl();
    const c10::TensorImpl *ii = THPVariable_Unpack(in).unsafeGetTensorImpl();
    if (!wi->key_set().has(c10::DispatchKey::FuncTorchGradWrapper) || wi == ii ||
        wrapper_value(wi) != ii)
        return -1;
    g_wrapper_ok = true;
    return 0;
}

int gt_capture_data_set(void *tensor, uint32_t stack, int (*assign)(void *ctx), void *ctx)
{
    PyObject *o = static_cast<PyObject *>(tensor);
    if (!C || !C->on || !C->active.load(std::memory_order_relaxed) ||
        !THPVariable_Check(o))
        return assign(ctx);
    Tls *tp = tls();
    if (!tp || tp->busy)
        return assign(ctx);
    Tls &t = *tp;
    at::Tensor x = THPVariable_Unpack(o); /* the same TensorImpl, after too */
    gt_cap_tensor before;
    int nd = facts(x, before);
    if (nd > GT_CAP_MAXDIM)
        nd = 0, before.flags |= GT_CAPT_NOGEOM;
    before.ndim = (uint16_t)nd;
    std::vector<int64_t> geom(2 * (size_t)nd);
    if (nd) {
        const c10::TensorImpl *d = data_of(x.unsafeGetTensorImpl());
        std::memcpy(geom.data(), d->sizes().data(), 8 * (size_t)nd);
        std::memcpy(geom.data() + nd, d->strides().data(), 8 * (size_t)nd);
    }
    int rc = assign(ctx);
    if (rc != 0 || !C->on || !before.impl)
        return rc;
    gt_cap_tensor now;
    facts(x, now);
    now.ndim = 0;
    if (now.storage == before.storage)
        return rc;
    uint64_t stamp = t.last_stamp = C->stamp.fetch_add(1, std::memory_order_relaxed) + 1;
    size_t len = sizeof(gt_cap_data_set) + 16 * (size_t)nd;
    auto *r =
        reinterpret_cast<gt_cap_data_set *>(reserve(t, len, GT_CAP_DATA_SET, stamp));
    if (!r)
        return rc;
    r->stack = stack;
    r->pad = 0;
    r->old = before;
    r->now = now;
    if (nd)
        std::memcpy(r + 1, geom.data(), 16 * (size_t)nd);
    /* the address stays this tensor's while the consumer knows it by it */
    c10::raw::weak_intrusive_ptr::incref(x.unsafeGetTensorImpl());
    r->old.flags |= GT_CAPT_WEAK;
    t.publish();
    return rc;
}

void gt_capture_backward_depth(int delta)
{
    if (C)
        C->in_backward += delta;
}

} // extern "C"
