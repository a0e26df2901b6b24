#include "stoker/service/common/element_codec.h"

#include <cstring>

#include "stoker/core/strings.h"

namespace stoker::service {
namespace {

constexpr char kMagic[4] = {'S', 'T', 'K', 'E'};
constexpr uint32_t kVersion = 1;

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}
void PutString(std::string* out, std::string_view s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}
void PadTo8(std::string* out) { out->append((8 - out->size() % 8) % 8, '\0'); }

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  bool Get(T* value) {
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* s) {
    uint32_t n;
    if (!Get(&n) || bytes_.size() - pos_ < n) return false;
    s->assign(bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Skip(size_t n) {
    if (bytes_.size() - pos_ < n) return false;
    pos_ += n;
    return true;
  }
  bool AlignTo8() { return Skip((8 - pos_ % 8) % 8); }
  size_t pos() const { return pos_; }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

}  // namespace

void EncodeElement(const data::Element& element, std::string* out) {
  size_t total = 64;
  for (const auto& k : element.keys) total += 4 + k.size();
  for (const auto& [name, t] : element.fields) total += 64 + name.size() + t.data.size();
  out->reserve(out->size() + total);
  out->append(kMagic, 4);
  Put<uint32_t>(out, kVersion);
  Put<uint64_t>(out, element.sample_index);
  Put<int64_t>(out, element.epoch);
  Put<uint32_t>(out, static_cast<uint32_t>(element.keys.size()));
  for (const auto& k : element.keys) PutString(out, k);
  Put<uint32_t>(out, static_cast<uint32_t>(element.fields.size()));
  for (const auto& [name, t] : element.fields) {
    PutString(out, name);
    Put<uint8_t>(out, static_cast<uint8_t>(t.dtype));
    Put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) Put<int64_t>(out, d);
    Put<uint64_t>(out, t.data.size());
    PadTo8(out);
    out->append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
}

absl::StatusOr<data::Element> DecodeElement(std::string bytes) {
  Buffer all = Buffer::FromString(std::move(bytes));
  std::string_view view(reinterpret_cast<const char*>(all.data()), all.size());
  Reader r(view);
  auto bad = [&](std::string_view what) {
    return absl::DataLossError(StrCat("malformed element payload (", all.size(), " bytes): ", what,
                                      " at byte ", r.pos()));
  };
  char magic[4];
  uint32_t version;
  if (!r.Get(&magic) || std::memcmp(magic, kMagic, 4) != 0) return bad("bad magic");
  if (!r.Get(&version) || version != kVersion) return bad("unknown version");
  data::Element e;
  uint32_t nkeys, nfields;
  if (!r.Get(&e.sample_index) || !r.Get(&e.epoch) || !r.Get(&nkeys)) return bad("short header");
  if (nkeys > view.size()) return bad("key count");
  e.keys.resize(nkeys);
  for (auto& k : e.keys)
    if (!r.GetString(&k)) return bad("key");
  if (!r.Get(&nfields) || nfields > view.size()) return bad("field count");
  for (uint32_t i = 0; i < nfields; ++i) {
    std::string name;
    uint8_t dtype;
    uint32_t rank;
    if (!r.GetString(&name) || !r.Get(&dtype) || !r.Get(&rank)) return bad("field header");
    if (dtype > static_cast<uint8_t>(data::DType::kBytes)) return bad("dtype");
    if (rank > 64) return bad("rank");
    data::Tensor t;
    t.dtype = static_cast<data::DType>(dtype);
    t.shape.resize(rank);
    for (auto& d : t.shape)
      if (!r.Get(&d) || d < 0) return bad("shape");
    uint64_t size;
    if (!r.Get(&size) || !r.AlignTo8()) return bad("data length");
    size_t start = r.pos();
    if (!r.Skip(size)) return bad("data shorter than its length");
    if (t.dtype != data::DType::kBytes &&
        static_cast<uint64_t>(t.NumValues()) * data::DTypeSize(t.dtype) != size)
      return bad(StrCat("field '", name, "' size does not match shape ", t.ShapeString()));
    t.data = all.Slice(start, size);
    e.fields.emplace(std::move(name), std::move(t));
  }
  return e;
}

}  // namespace stoker::service
