#include "stoker/service/common/element_codec.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "stoker/core/little_endian.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::service {
namespace {

constexpr char kMagic[4] = {'S', 'T', 'K', 'E'};
constexpr char kCompressedMagic[4] = {'S', 'T', 'K', 'Z'};
constexpr size_t kCompressedHeader = 16;  // magic, algorithm, 3 zero bytes, u64 encoded length
constexpr uint32_t kVersion = 1;
constexpr int kZstdLevel = 1;  // fast: the worker compresses on the data path

template <typename T>
void Put(std::string* out, T value) {
  AppendLittleEndian<T>(out, value);
}
void PutString(std::string* out, std::string_view s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

// Reads an encoding from its consecutive pieces (one buffer, or the gather list of a payload
// handed over in shared memory and mapped files): fixed-size fields may straddle pieces; Take
// slices data that lies in one piece and copies together data that spans several.
class Reader {
 public:
  explicit Reader(const std::vector<Buffer>& pieces) : pieces_(pieces) {
    for (const Buffer& b : pieces) total_ += b.size();
  }
  template <typename T>
  bool Get(T* value) {
    char bytes[sizeof(T)];
    if (!Read(bytes, sizeof(T))) return false;
    if constexpr (std::is_integral_v<T>) {
      *value = LoadLittleEndian<T>(bytes);
    } else {
      std::memcpy(value, bytes, sizeof(T));  // bytes (the magic)
    }
    return true;
  }
  bool GetString(std::string* s) {
    uint32_t n;
    if (!Get(&n) || left() < n) return false;
    s->resize(n);
    return Read(s->data(), n);
  }
  // The next n bytes as a buffer sharing the pieces' storage where they lie in one piece.
  std::optional<Buffer> Take(size_t n) {
    if (left() < n) return std::nullopt;
    if (n == 0) return piece_ < pieces_.size() ? pieces_[piece_].Slice(at_, 0) : Buffer();
    std::vector<Buffer> parts;
    Walk(n, [&](const Buffer& b, size_t at, size_t len) {
      if (len > 0) parts.push_back(b.Slice(at, len));
    });
    return Buffer::Concat(parts);
  }
  bool Skip(size_t n) {
    if (left() < n) return false;
    Walk(n, [](const Buffer&, size_t, size_t) {});
    return true;
  }
  bool AlignTo8() { return Skip((8 - pos_ % 8) % 8); }
  size_t left() const { return total_ - pos_; }
  size_t pos() const { return pos_; }
  size_t total() const { return total_; }

 private:
  bool Read(char* out, size_t n) {
    if (left() < n) return false;
    Walk(n, [&](const Buffer& b, size_t at, size_t len) {
      if (len > 0) std::memcpy(out, b.data() + at, len);
      out += len;
    });
    return true;
  }
  // Moves over n <= left() bytes, handing each piece's part to visit(piece, offset, length).
  template <typename F>
  void Walk(size_t n, F&& visit) {
    pos_ += n;
    while (n > 0) {
      const Buffer& b = pieces_[piece_];
      const size_t len = std::min(n, b.size() - at_);
      visit(b, at_, len);
      at_ += len;
      n -= len;
      if (at_ == b.size()) {
        ++piece_;
        at_ = 0;
      }
    }
  }

  const std::vector<Buffer>& pieces_;
  size_t total_ = 0;
  size_t pos_ = 0;    // bytes read of all pieces
  size_t piece_ = 0;  // the piece holding the next byte
  size_t at_ = 0;     // its offset in that piece
};

absl::Status Malformed(size_t total, std::string_view what, size_t at) {
  return absl::DataLossError(
      StrCat("malformed element payload (", total, " bytes): ", what, " at byte ", at));
}

// The encoding inside a compressed payload.
absl::StatusOr<Buffer> Decompress(const Buffer& all) {
  if (all.size() < kCompressedHeader) return Malformed(all.size(), "short compression header", 0);
  uint8_t algorithm = all.data()[4];
  uint64_t size = LoadLittleEndian<uint64_t>(all.chars() + 8);
  if (size > kMaxElementBytes)
    return Malformed(all.size(), StrCat("decompressed length ", size, " over the limit"), 8);
  const char* src = all.chars() + kCompressedHeader;
  size_t src_size = all.size() - kCompressedHeader;
  // Check that the compressed bytes can hold `size` before allocating it.
  if (algorithm == static_cast<uint8_t>(Compression::kZstd)) {
    unsigned long long framed = ZSTD_getFrameContentSize(src, src_size);
    if (framed != size)
      return Malformed(all.size(), "zstd frame does not state the decoded length",
                       kCompressedHeader);
  } else if (algorithm == static_cast<uint8_t>(Compression::kLz4)) {
    if (size > static_cast<uint64_t>(src_size) * 255 + 16)  // lz4 expands at most ~255x
      return Malformed(all.size(), "lz4 data too short for its decoded length", kCompressedHeader);
  }
  MutableBuffer out(size);
  if (algorithm == static_cast<uint8_t>(Compression::kZstd)) {
    size_t n = ZSTD_decompress(out.data(), size, src, src_size);
    if (ZSTD_isError(n))
      return Malformed(all.size(), StrCat("zstd: ", ZSTD_getErrorName(n)), kCompressedHeader);
    if (n != size)
      return Malformed(all.size(), "zstd data shorter than its length", kCompressedHeader);
  } else if (algorithm == static_cast<uint8_t>(Compression::kLz4)) {
    if (size > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE) || src_size > LZ4_MAX_INPUT_SIZE)
      return Malformed(all.size(), "lz4 block too large", kCompressedHeader);
    int n =
        LZ4_decompress_safe(src, out.chars(), static_cast<int>(src_size), static_cast<int>(size));
    if (n < 0 || static_cast<uint64_t>(n) != size)
      return Malformed(all.size(), "lz4 data corrupt or not its stated length", kCompressedHeader);
  } else {
    return Malformed(all.size(), StrCat("unknown compression algorithm ", int{algorithm}), 4);
  }
  return std::move(out).Finish();
}

}  // namespace

namespace {

// Builds the uncompressed encoding as pieces: header bytes accumulate in `header` until a
// tensor's data, which becomes a piece of its own.
EncodedElement EncodePieces(const data::Element& element) {
  EncodedElement out;
  std::string header;
  auto flush = [&] {
    if (header.empty()) return;
    out.size += header.size();
    out.pieces.push_back(Buffer::FromString(std::move(header)));
    header.clear();
  };
  header.append(kMagic, 4);
  Put<uint32_t>(&header, kVersion);
  Put<uint64_t>(&header, element.sample_index);
  Put<int64_t>(&header, element.epoch);
  Put<uint32_t>(&header, static_cast<uint32_t>(element.keys.size()));
  for (const auto& k : element.keys) PutString(&header, k);
  Put<uint32_t>(&header, static_cast<uint32_t>(element.fields.size()));
  for (const auto& [name, t] : element.fields) {
    PutString(&header, name);
    Put<uint8_t>(&header, static_cast<uint8_t>(t.dtype));
    Put<uint32_t>(&header, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) Put<int64_t>(&header, d);
    Put<uint64_t>(&header, t.data.size());
    header.append((8 - (out.size + header.size()) % 8) % 8, '\0');  // data at a multiple of 8
    if (t.data.empty()) continue;
    flush();
    out.size += t.data.size();
    out.pieces.push_back(t.data);
  }
  flush();
  return out;
}

// The compressed payload (header + data) in a buffer of exactly its size, since the worker's byte
// budget counts that size; nullopt if the codec fails (the caller sends the payload plain).
std::optional<Buffer> Compress(std::string_view raw, Compression compression) {
  size_t bound = compression == Compression::kZstd
                     ? ZSTD_compressBound(raw.size())
                     : LZ4_compressBound(static_cast<int>(raw.size()));
  MutableBuffer scratch(kCompressedHeader + bound);
  size_t n = 0;
  if (compression == Compression::kZstd) {
    n = ZSTD_compress(scratch.data() + kCompressedHeader, bound, raw.data(), raw.size(),
                      kZstdLevel);
    if (ZSTD_isError(n)) return std::nullopt;  // cannot happen with a bound-sized output
  } else {
    if (raw.size() > LZ4_MAX_INPUT_SIZE) return std::nullopt;
    int m = LZ4_compress_default(raw.data(), scratch.chars() + kCompressedHeader,
                                 static_cast<int>(raw.size()), static_cast<int>(bound));
    if (m <= 0) return std::nullopt;
    n = static_cast<size_t>(m);
  }
  MutableBuffer out(kCompressedHeader + n);
  std::memset(out.data(), 0, kCompressedHeader);
  std::memcpy(out.data(), kCompressedMagic, 4);
  out.data()[4] = static_cast<uint8_t>(compression);
  StoreLittleEndian(out.chars() + 8, raw.size(), 8);
  std::memcpy(out.data() + kCompressedHeader, scratch.data() + kCompressedHeader, n);
  return std::move(out).Finish();
}

}  // namespace

EncodedElement EncodeElementPieces(const data::Element& element, Compression compression) {
  EncodedElement pieces = EncodePieces(element);
  if (compression == Compression::kNone) return pieces;
  std::string raw;
  raw.reserve(pieces.size);
  for (const Buffer& b : pieces.pieces) raw.append(b.view());
  std::optional<Buffer> compressed = Compress(raw, compression);
  if (!compressed) return pieces;
  EncodedElement out;
  out.size = compressed->size();
  out.pieces.push_back(*std::move(compressed));
  return out;
}

void EncodeElement(const data::Element& element, std::string* out) {
  EncodedElement pieces = EncodePieces(element);
  out->reserve(out->size() + pieces.size);
  for (const Buffer& b : pieces.pieces) out->append(b.view());
}

std::string EncodeElement(const data::Element& element, Compression compression) {
  EncodedElement pieces = EncodeElementPieces(element, compression);
  std::string out;
  out.reserve(pieces.size);
  for (const Buffer& b : pieces.pieces) out.append(b.view());
  return out;
}

absl::StatusOr<data::Element> DecodeElement(Buffer all) {
  return DecodeElement(std::vector<Buffer>{std::move(all)});
}

absl::StatusOr<data::Element> DecodeElement(const std::vector<Buffer>& pieces) {
  const std::vector<Buffer>* parts = &pieces;
  std::vector<Buffer> decompressed;
  {
    Reader peek(pieces);
    char magic[4];
    if (peek.Get(&magic) && std::memcmp(magic, kCompressedMagic, 4) == 0) {
      ASSIGN_OR_RETURN(Buffer plain, Decompress(Buffer::Concat(pieces)));
      decompressed.push_back(std::move(plain));
      parts = &decompressed;
    }
  }
  Reader r(*parts);
  auto bad = [&](std::string_view what) { return Malformed(r.total(), what, r.pos()); };
  char magic[4];
  uint32_t version;
  if (!r.Get(&magic) || std::memcmp(magic, kMagic, 4) != 0) return bad("bad magic");
  if (!r.Get(&version) || version != kVersion) return bad("unknown version");
  data::Element e;
  uint32_t nkeys, nfields;
  if (!r.Get(&e.sample_index) || !r.Get(&e.epoch) || !r.Get(&nkeys)) return bad("short header");
  // Counts are bounded by the bytes left (a key takes at least 4, a field at least 17), and
  // entries are added as they are read: a small payload cannot make the decoder allocate much.
  if (nkeys > r.left() / 4) return bad("key count");
  e.keys.reserve(nkeys);
  for (uint32_t i = 0; i < nkeys; ++i) {
    std::string k;
    if (!r.GetString(&k)) return bad("key");
    e.keys.push_back(std::move(k));
  }
  if (!r.Get(&nfields) || nfields > r.left() / 17) return bad("field count");
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
    std::optional<Buffer> bytes = r.Take(size);
    if (!bytes) return bad("data shorter than its length");
    if (t.dtype != data::DType::kBytes) {
      // The shape's byte size, without overflow (hostile dims must not wrap to the data length).
      uint64_t expected = data::DTypeSize(t.dtype);
      for (int64_t d : t.shape)
        if (__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected))
          return bad(StrCat("field '", name, "' shape overflows"));
      if (expected != size)
        return bad(StrCat("field '", name, "' size does not match shape ", t.ShapeString()));
    }
    // Tensor bytes start at a multiple of 8 in the encoding, and so in memory where a payload
    // arrives in one buffer; a range of a worker's file keeps the file's alignment, which a
    // numeric tensor must not inherit (bytes have none to keep).
    if (t.dtype != data::DType::kBytes && reinterpret_cast<uintptr_t>(bytes->data()) % 8 != 0)
      bytes = Buffer::Copy(bytes->view());
    t.data = *std::move(bytes);
    e.fields.emplace(std::move(name), std::move(t));
  }
  return e;
}

}  // namespace stoker::service
