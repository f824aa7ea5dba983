// xmge: a header-only C++ API over the C API of xm_api.h, shaped like MegEngine Lite's Network.
//
//   #include "xmge.hpp"
//   xmge::Network net("pkg/libresnet.so", "pkg/weights.bin");   // dlopen; prefix from the file name
//   // or, with the model linked in:  XM_DECLARE_API(resnet);  xmge::Network net(resnet_api(), "weights.bin");
//   xmge::Tensor& in = net.input("data");          // or net.input(0); host memory, 64-byte aligned
//   std::copy(pixels, pixels + in.size(), in.data<float>());
//   net.forward();                                  // throws xmge::Error with the runtime's message
//   const float* logits = net.output(0).data<float>();
//
// Several shapes: in.reshape({4, 3, 224, 224}) resizes that input; forward() then runs the library's
// variant whose inputs have the current shapes (outputs take that variant's shapes), or throws
// listing the shapes the library holds. A Network is one model instance; forward() on one Network
// from several threads at once is not supported (its tensors are shared): use a Network per thread
// (cheap for a linked library), or the C API, whose run may be called on one instance from any number
// of threads.
#ifndef XMGE_HPP
#define XMGE_HPP

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "xm_api.h"

namespace xmge {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A model's library: opened with dlopen (closed when the last Network using it goes) or linked in.
class Library {
 public:
  // path: .../lib<prefix>.so; prefix: default from the file name
  static std::shared_ptr<Library> open(const std::string& path, std::string prefix = "") {
    if (prefix.empty()) {
      std::string base = path.substr(path.find_last_of('/') + 1);
      if (base.compare(0, 3, "lib") == 0) base = base.substr(3);
      prefix = base.substr(0, base.find(".so"));
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw Error(std::string("cannot load ") + path + ": " + dlerror());
    const xm_api* api = xm_api_from_handle(handle, prefix.c_str());
    if (!api) {
      dlclose(handle);
      throw Error(path + " has no " + prefix + "_api of ABI version " + std::to_string(XM_ABI_VERSION));
    }
    return std::shared_ptr<Library>(new Library(api, handle));
  }
  static std::shared_ptr<Library> linked(const xm_api* api) {
    if (!api || api->abi_version != XM_ABI_VERSION) throw Error("not an xmge model API of this ABI version");
    return std::shared_ptr<Library>(new Library(api, nullptr));
  }
  const xm_api& api() const { return *api_; }
  ~Library() {
    if (handle_) dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

 private:
  Library(const xm_api* api, void* handle) : api_(api), handle_(handle) {}
  const xm_api* api_;
  void* handle_;
};

// One input or output: name, dtype, shape and a host buffer the Network owns.
class Tensor {
 public:
  const std::string& name() const { return name_; }
  const std::string& dtype() const { return dtype_; }
  const std::vector<long>& shape() const { return shape_; }
  size_t size() const {
    size_t n = 1;
    for (long d : shape_) n *= static_cast<size_t>(d);
    return n;
  }
  size_t nbytes() const { return size() * elem_; }
  void* data() { return buf_.get(); }
  const void* data() const { return buf_.get(); }
  template <class T>
  T* data() {
    return static_cast<T*>(data());
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(data());
  }
  // a new shape for an input (its contents are not kept); the next forward picks the variant
  void reshape(const std::vector<long>& shape) {
    if (shape.size() > XM_MAX_DIMS) throw Error(name_ + ": more than " + std::to_string(XM_MAX_DIMS) + " dimensions");
    set(shape);
  }

 private:
  friend class Network;
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  void describe(const xm_tensor_info& info) {
    name_ = info.name;
    dtype_ = info.dtype;
    std::vector<long> shape(info.shape, info.shape + info.ndim);
    size_t n = 1;
    for (long d : shape) n *= static_cast<size_t>(d);
    if (n) elem_ = info.nbytes / n;
    set(shape);
  }
  void set(const std::vector<long>& shape) {
    const size_t before = buf_ ? nbytes() : static_cast<size_t>(-1);
    shape_ = shape;
    if (nbytes() != before || !buf_) {
      // 64-byte aligned like the runtime's own buffers; at least one block so data() is never null
      const size_t bytes = (nbytes() + 63) / 64 * 64;
      buf_.reset(std::aligned_alloc(64, bytes ? bytes : 64));
      if (!buf_) throw Error(name_ + ": out of memory");
    }
  }
  std::string name_, dtype_;
  std::vector<long> shape_;
  size_t elem_ = 1;
  std::unique_ptr<void, Free> buf_;
};

struct Config {
  int threads = 0;     // <= 0: the compiled default
  int max_arenas = 0;  // <= 0: the runtime's default pool bound (xm_runtime.h)
};

class Network {
 public:
  Network(const std::string& library_path, const std::string& weights_path, Config config = {})
      : Network(Library::open(library_path), read(weights_path), config) {}
  Network(const xm_api* api, const std::string& weights_path, Config config = {})
      : Network(Library::linked(api), read(weights_path), config) {}
  Network(std::shared_ptr<Library> lib, const std::vector<unsigned char>& weights, Config config = {})
      : lib_(std::move(lib)) {
    const xm_api& api = lib_->api();
    model_ = api.create(weights.data(), weights.size(), config.threads, config.max_arenas);
    if (!model_) throw Error(std::string(api.prefix) + ": " + api.last_error());
    use(0);
  }
  ~Network() {
    if (model_) lib_->api().destroy(model_);
  }
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;
  Network(Network&& o) noexcept
      : lib_(std::move(o.lib_)), model_(std::exchange(o.model_, nullptr)), variant_(o.variant_),
        inputs_(std::move(o.inputs_)), outputs_(std::move(o.outputs_)) {}

  const xm_api& api() const { return lib_->api(); }
  int variant() const { return variant_; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  Tensor& input(size_t i) { return at(inputs_, i, "input"); }
  Tensor& input(const std::string& name) { return named(inputs_, name, "input"); }
  Tensor& output(size_t i) { return at(outputs_, i, "output"); }
  Tensor& output(const std::string& name) { return named(outputs_, name, "output"); }

  void forward() {
    const xm_api& api = lib_->api();
    std::vector<xm_shape> shapes(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      shapes[i].ndim = static_cast<int>(inputs_[i].shape().size());
      for (int d = 0; d < shapes[i].ndim; ++d) shapes[i].dims[d] = inputs_[i].shape()[d];
    }
    const int v = api.find_variant(static_cast<int>(shapes.size()), shapes.data());
    if (v < 0) throw Error(std::string(api.prefix) + ": " + api.last_error());
    if (v != variant_) use(v);
    std::vector<const void*> in;
    std::vector<void*> out;
    for (Tensor& t : inputs_) in.push_back(t.data());
    for (Tensor& t : outputs_) out.push_back(t.data());
    if (api.run_variant(model_, v, in.data(), out.data()))
      throw Error(std::string(api.prefix) + ": " + api.last_error());
  }

 private:
  static std::vector<unsigned char> read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("cannot open weights " + path);
    return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  // tables of variant v: inputs keep their buffers when the shapes already agree (data written
  // after a reshape survives), outputs take the variant's shapes
  void use(int v) {
    const xm_variant& var = lib_->api().variants[v];
    inputs_.resize(var.num_inputs);
    for (int i = 0; i < var.num_inputs; ++i) inputs_[i].describe(var.inputs[i]);
    outputs_.resize(var.num_outputs);
    for (int i = 0; i < var.num_outputs; ++i) outputs_[i].describe(var.outputs[i]);
    variant_ = v;
  }
  static Tensor& at(std::vector<Tensor>& ts, size_t i, const char* kind) {
    if (i >= ts.size()) throw Error(std::string("no ") + kind + " " + std::to_string(i));
    return ts[i];
  }
  static Tensor& named(std::vector<Tensor>& ts, const std::string& name, const char* kind) {
    for (Tensor& t : ts)
      if (t.name() == name) return t;
    std::string known;
    for (Tensor& t : ts) known += (known.empty() ? "" : ", ") + t.name();
    throw Error(std::string("no ") + kind + " named " + name + " (the model has " + known + ")");
  }

  std::shared_ptr<Library> lib_;
  xm_model* model_ = nullptr;
  int variant_ = 0;
  std::vector<Tensor> inputs_, outputs_;
};

}  // namespace xmge
#endif
