/*
 * torch_layout.h: what the engine adapter reads of libtorch's C++ objects
 * beyond their public interface, taken from the installed torch's own
 * headers and checked when it is compiled.
 *
 * The shim reads a few private members: a SavedVariable's tensor, version
 * and flags (unpacking it would throw on a stale tensor), the thread's
 * dispatch modes in place (TorchDispatchModeTLS's accessors copy them, about
 * 70 instructions each), and a VariableVersion's counter address (the
 * identity of a version counter). Instead of a hand-kept copy of each class
 * (a mirror struct cast over the real one, silently wrong when a release
 * adds a member), each member is reached through a pointer to member taken
 * by name in an explicit template instantiation, where C++ does not check
 * access ([temp.spec.general]/6, the "private member access" idiom): its
 * offset and type come from the header, and a release that renames or
 * retypes one fails to compile. The static_asserts below state what the
 * shim relies on of each. Node ownership (std::shared_ptr up to 2.12,
 * c10::intrusive_ptr from 2.13) is read off torch::autograd::Edge, and how
 * a custom Function's node holds its Python object off PyNode.
 *
 * CMakeLists.txt compiles this header alone (layout_probe.cpp) before it
 * builds the adapter: a torch whose layouts fail here is not built, with one
 * line saying so. gt_capture_selftest checks the values read through each
 * member on a real graph at start-up.
 */
#ifndef GT_TORCH_LAYOUT_H
#define GT_TORCH_LAYOUT_H

#include <c10/core/TensorImpl.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/python_function.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/version.h>

#include <array>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace gt_layout
{

/* member(Tag{}) is the pointer to member Access<Tag, M> was instantiated
 * with; the friend is found by argument-dependent lookup on Tag. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-template-friend"
#endif
template <class Tag, auto M> struct Access {
    friend constexpr auto member(Tag) { return M; }
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#define GT_PRIVATE_MEMBER(tag, cls, name)                                                \
    struct tag {                                                                         \
        friend constexpr auto member(tag);                                               \
    };                                                                                   \
    template struct Access<tag, &cls::name>

using c10::impl::TorchDispatchModeTLS;
using torch::autograd::SavedVariable;

GT_PRIVATE_MEMBER(SvData, SavedVariable, data_);
GT_PRIVATE_MEMBER(SvSavedVersion, SavedVariable, saved_version_);
GT_PRIVATE_MEMBER(SvIsOutput, SavedVariable, is_output_);
GT_PRIVATE_MEMBER(SvDefault, SavedVariable, was_default_constructed_);
GT_PRIVATE_MEMBER(ModesStack, TorchDispatchModeTLS, stack_);
GT_PRIVATE_MEMBER(ModesInfra, TorchDispatchModeTLS, infra_modes_);
GT_PRIVATE_MEMBER(VvCounter, c10::VariableVersion, version_counter_);

/* the type of the member M points to in class C */
template <class P> struct member_of;
template <class C, class T> struct member_of<T C::*> {
    using type = T;
};
template <class Tag> using member_t = typename member_of<decltype(member(Tag{}))>::type;

/* SavedVariable: the saved tensor (or, for an output, its data without
 * grad_fn), the version it had when saved, whether it is the node's own
 * output, whether the slot was never filled */
static_assert(std::is_same_v<member_t<SvData>, at::Tensor>, "SavedVariable::data_");
static_assert(std::is_same_v<member_t<SvSavedVersion>, uint32_t>,
              "SavedVariable::saved_version_");
static_assert(std::is_same_v<member_t<SvIsOutput>, bool>, "SavedVariable::is_output_");
static_assert(std::is_same_v<member_t<SvDefault>, bool>,
              "SavedVariable::was_default_constructed_");

/* TorchDispatchModeTLS: the user's mode stack, and one optional slot per
 * infrastructure mode key (FAKE, PROXY, ...) */
template <class T> struct is_vector : std::false_type {
};
template <class T> struct is_vector<std::vector<T>> : std::true_type {
};
template <class T> struct infra_array : std::false_type {
};
template <class T, size_t N>
struct infra_array<std::array<std::optional<T>, N>> : std::bool_constant<(N > 0)> {
};
static_assert(is_vector<member_t<ModesStack>>::value, "TorchDispatchModeTLS::stack_");
static_assert(infra_array<member_t<ModesInfra>>::value,
              "TorchDispatchModeTLS::infra_modes_");
static_assert(std::tuple_size_v<member_t<ModesInfra>> ==
                  static_cast<size_t>(c10::impl::TorchDispatchModeKey::NUM_MODE_KEYS),
              "TorchDispatchModeTLS::infra_modes_ has a slot per mode key");

/* VariableVersion: one pointer to the shared counter */
template <class T> struct is_intrusive : std::false_type {
};
template <class T> struct is_intrusive<c10::intrusive_ptr<T>> : std::true_type {
};
static_assert(is_intrusive<member_t<VvCounter>>::value,
              "VariableVersion::version_counter_");

/* How a Node is owned (Edge::function), and the weak reference of it */
using Node = torch::autograd::Node;
using NodePtr = decltype(torch::autograd::Edge::function);
template <class P> struct weak_of;
template <class T> struct weak_of<std::shared_ptr<T>> {
    using type = std::weak_ptr<T>;
    static type empty() { return type(); }
};
template <class T> struct weak_of<c10::intrusive_ptr<T>> {
    using type = c10::weak_intrusive_ptr<T>;
    static type empty() { return type(c10::intrusive_ptr<T>()); }
};
using NodeWeak = weak_of<NodePtr>;
static_assert(std::is_same_v<NodePtr, std::shared_ptr<Node>> ||
                  std::is_same_v<NodePtr, c10::intrusive_ptr<Node>>,
              "autograd::Edge::function is a shared_ptr or an intrusive_ptr of Node");

/* A custom autograd.Function's node: its THPFunction (the public `obj` up to
 * 2.12, where Node::pyobj() is another object, the wrapper of a C++ node;
 * PyNode::pyobj() from 2.13) */
template <class P, class = void> struct has_obj : std::false_type {
};
template <class P>
struct has_obj<P, std::void_t<decltype(std::declval<const P &>().obj)>> : std::true_type {
};
template <class P> PyObject *pynode_object(const P *pn)
{
    if constexpr (has_obj<P>::value)
        return pn->obj;
    else
        return pn->pyobj();
}
static_assert(std::is_same_v<decltype(pynode_object(
                                 static_cast<const torch::autograd::PyNode *>(nullptr))),
                             PyObject *>,
              "PyNode's Python object");

} // namespace gt_layout

#endif
