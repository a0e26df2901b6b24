// The storage helpers of stoker._stoker over the object-store layer (io::OpenUrl): File (the size
// and byte ranges of one object, read without copying), ls (a listing) and dataset_classes (the
// class names a dataset's manifest records). A File is safe to share across threads.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bindings.h"
#include "stoker/core/buffer.h"
#include "stoker/format/manifest.h"
#include "stoker/io/object_store.h"
#include "stoker/io/url.h"

namespace stoker::python {
namespace {

// The class names a converted folder tree's manifest records (format::Manifest::classes).
std::vector<std::string> DatasetClasses(const std::string& url) {
  std::string manifest_url = url;
  if (!url.ends_with(".json")) {
    manifest_url = io::JoinUrl(url, std::string(format::kManifestName));
  }
  io::StoreAndKey target = ValueOrRaise(io::OpenUrl(manifest_url));
  absl::StatusOr<Buffer> bytes;
  {
    py::gil_scoped_release release;
    bytes = target.store->Read(target.key);
  }
  Buffer text = ValueOrRaise(std::move(bytes));
  return ValueOrRaise(format::ParseManifest(text.view(), manifest_url)).classes;
}

class File {
 public:
  explicit File(const std::string& url) : url_(url) {
    target_ = ValueOrRaise(io::OpenUrl(url));
    absl::StatusOr<io::ObjectInfo> info;
    {
      py::gil_scoped_release release;
      info = target_.store->Stat(target_.key);
    }
    size_ = ValueOrRaise(std::move(info)).size;
  }
  uint64_t size() const { return size_; }
  const std::string& url() const { return url_; }

  // Bytes [offset, offset + length) clipped to the object's end, as a Buffer (no copy).
  PyBuffer ReadRange(uint64_t offset, uint64_t length) {
    if (offset >= size_ || length == 0) return PyBuffer{};
    length = std::min<uint64_t>(length, size_ - offset);
    absl::StatusOr<Buffer> bytes;
    {
      py::gil_scoped_release release;
      bytes = target_.store->Read(target_.key, io::ByteRange{offset, length});
    }
    return PyBuffer{ValueOrRaise(std::move(bytes))};
  }

 private:
  std::string url_;
  io::StoreAndKey target_;
  uint64_t size_ = 0;
};

py::list Ls(const std::string& url, bool recursive) {
  io::StoreAndKey target = ValueOrRaise(io::OpenUrl(url));
  py::list out;
  auto entry = [&](const std::string& entry_url, std::optional<uint64_t> size,
                   std::optional<double> mtime) {
    py::dict d;
    d["url"] = entry_url;
    d["size"] = size ? py::cast(*size) : py::none();
    d["mtime"] = mtime ? py::cast(*mtime) : py::none();
    d["is_dir"] = !size.has_value();
    out.append(d);
  };
  std::string prefix = target.key;
  absl::StatusOr<io::ListResult> listing;
  {
    py::gil_scoped_release release;
    // A URL naming one object lists that object; otherwise the "folder" below it.
    if (!prefix.empty() && !prefix.ends_with("/")) {
      absl::StatusOr<io::ObjectInfo> info = target.store->Stat(prefix);
      if (info.ok()) {
        listing = io::ListResult{};
        listing->objects.push_back(*info);
      } else {
        prefix += "/";
      }
    }
    if (!listing.ok()) listing = target.store->List({prefix, recursive ? "" : "/", 0});
  }
  io::ListResult result = ValueOrRaise(std::move(listing));
  for (const std::string& folder : result.common_prefixes) {
    entry(target.store->Url(folder), std::nullopt, std::nullopt);
  }
  for (const io::ObjectInfo& info : result.objects) {
    entry(target.store->Url(info.key), info.size,
          absl::ToDoubleSeconds(info.mtime - absl::UnixEpoch()));
  }
  return out;
}

}  // namespace

void BindStorage(py::module_& m) {
  py::class_<File>(m, "File")
      .def(py::init<const std::string&>(), py::arg("url"))
      .def_property_readonly("size", &File::size)
      .def_property_readonly("url", &File::url)
      .def("read_range", &File::ReadRange, py::arg("offset"), py::arg("length"));

  m.def("ls", &Ls, py::arg("url"), py::arg("recursive") = false);
  m.def("dataset_classes", &DatasetClasses, py::arg("url"),
        "class names recorded in a dataset's manifest (empty when it has none)");
}

}  // namespace stoker::python
