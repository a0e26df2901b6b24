#include "stoker/format/tfrecord.h"

#include <algorithm>
#include <cstdio>

#include "stoker/core/little_endian.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/example.pb.h"
#include "stoker/format/crc32c.h"
#include "stoker/io/url.h"

namespace stoker::format::tfrecord {
namespace {

constexpr std::string_view kKeyFeature = "__key__";

}  // namespace

void AppendRecord(std::string_view data, std::string* out) {
  std::string header;
  AppendLittleEndian(&header, data.size(), 8);
  out->append(header);
  AppendLittleEndian(out, crc32c::Mask(crc32c::Value(header)), 4);
  out->append(data);
  AppendLittleEndian(out, crc32c::Mask(crc32c::Value(data)), 4);
}

absl::StatusOr<uint64_t> ParseHeader(std::string_view header, std::string_view url,
                                     uint64_t offset) {
  if (header.size() != kHeaderSize) {
    return absl::DataLossError(StrCat(url, ": truncated TFRecord header at offset ", offset));
  }
  uint32_t stored = static_cast<uint32_t>(LoadLittleEndian(header.data() + 8, 4));
  if (crc32c::Mask(crc32c::Value(header.substr(0, 8))) != stored) {
    return absl::DataLossError(StrCat(url, ": TFRecord at offset ", offset,
                                      ": length CRC32C mismatch (corrupt or not a TFRecord file)"));
  }
  uint64_t length = LoadLittleEndian(header.data(), 8);
  if (length > kMaxRecordLength) {
    return absl::DataLossError(StrCat(url, ": TFRecord at offset ", offset, " claims ", length,
                                      " bytes (more than 1 GiB)"));
  }
  return length;
}

std::string NotATfRecord(std::string_view head, uint64_t size) {
  if (size == 0) return "empty file";
  if (head.size() < kHeaderSize) {
    return StrCat("only ", size, " bytes; a TFRecord record header takes ", kHeaderSize);
  }
  uint32_t stored = static_cast<uint32_t>(LoadLittleEndian(head.data() + 8, 4));
  uint32_t computed = crc32c::Mask(crc32c::Value(head.substr(0, 8)));
  if (computed != stored) {
    char text[96];
    std::snprintf(text, sizeof(text),
                  "the length CRC32C at offset 8 is 0x%08x; the length at offset 0 gives 0x%08x",
                  stored, computed);
    return text;
  }
  uint64_t length = LoadLittleEndian(head.data(), 8);
  if (length > kMaxRecordLength) {
    return StrCat("the record at offset 0 claims ", length, " bytes (more than 1 GiB)");
  }
  return "";
}

absl::Status CheckData(std::string_view data, std::string_view crc, std::string_view url,
                       uint64_t offset) {
  if (crc.size() != 4 ||
      crc32c::Mask(crc32c::Value(data)) != static_cast<uint32_t>(LoadLittleEndian(crc.data(), 4))) {
    return absl::DataLossError(
        StrCat(url, ": TFRecord at offset ", offset, ": data CRC32C mismatch"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Sample> ExampleToSample(std::string_view bytes, std::string default_key) {
  tfexample::Example example;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !example.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError("not a tf.train.Example protobuf");
  }
  Sample sample;
  sample.key = std::move(default_key);
  auto* features = example.mutable_features()->mutable_feature();
  std::vector<std::string> names;
  names.reserve(features->size());
  for (const auto& [name, feature] : *features) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    tfexample::Feature& feature = (*features)[name];
    if (name == kKeyFeature) {
      if (feature.has_bytes_list() && feature.bytes_list().value_size() == 1) {
        sample.key = feature.bytes_list().value(0);
        continue;
      }
    }
    switch (feature.kind_case()) {
      case tfexample::Feature::kBytesList: {
        auto* values = feature.mutable_bytes_list()->mutable_value();
        if (values->empty()) {
          // An empty list is kept as an empty field, as an empty int64_list or float_list is.
          sample.fields.push_back({name, Buffer()});
        } else if (values->size() == 1) {
          sample.fields.push_back({name, Buffer::FromString(std::move((*values)[0]))});
        } else {
          for (int i = 0; i < values->size(); ++i) {
            sample.fields.push_back(
                {StrCat(name, ".", i), Buffer::FromString(std::move((*values)[i]))});
          }
        }
        break;
      }
      case tfexample::Feature::kInt64List: {
        std::string text;
        for (int64_t v : feature.int64_list().value()) {
          if (!text.empty()) text.push_back(' ');
          text += std::to_string(v);
        }
        sample.fields.push_back({name, Buffer::FromString(std::move(text))});
        break;
      }
      case tfexample::Feature::kFloatList: {
        std::string text;
        for (float v : feature.float_list().value()) {
          if (!text.empty()) text.push_back(' ');
          char number[32];
          std::snprintf(number, sizeof(number), "%.9g", static_cast<double>(v));
          text += number;
        }
        sample.fields.push_back({name, Buffer::FromString(std::move(text))});
        break;
      }
      case tfexample::Feature::KIND_NOT_SET:
        sample.fields.push_back({name, Buffer()});
        break;
    }
  }
  if (sample.key.empty()) return absl::DataLossError("tf.train.Example with an empty __key__");
  return sample;
}

std::string SampleToExample(const Sample& sample) {
  tfexample::Example example;
  auto* features = example.mutable_features()->mutable_feature();
  (*features)[std::string(kKeyFeature)].mutable_bytes_list()->add_value(sample.key);
  for (const Field& field : sample.fields) {
    (*features)[field.name].mutable_bytes_list()->add_value(field.value.ToString());
  }
  std::string out;
  example.SerializeToString(&out);
  return out;
}

absl::StatusOr<std::unique_ptr<TfRecordWriter>> TfRecordWriter::Open(std::string_view url) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, io::OpenUrl(url));
  ASSIGN_OR_RETURN(std::unique_ptr<io::ObjectWriter> writer, target.store->OpenWriter(target.key));
  return std::unique_ptr<TfRecordWriter>(new TfRecordWriter(std::move(writer), std::string(url)));
}

absl::Status TfRecordWriter::Flush() {
  if (pending_.empty()) return absl::OkStatus();
  absl::Status status = writer_->Append(Buffer::FromString(std::move(pending_)));
  pending_.clear();
  if (!status.ok()) return Annotate(status, StrCat("writing ", url_));
  return absl::OkStatus();
}

absl::Status TfRecordWriter::Write(std::string_view record) {
  AppendRecord(record, &pending_);
  if (pending_.size() >= (8 << 20)) return Flush();
  return absl::OkStatus();
}

absl::Status TfRecordWriter::Close() {
  RETURN_IF_ERROR(Flush());
  absl::Status status = writer_->Close();
  if (!status.ok()) return Annotate(status, StrCat("closing ", url_));
  return absl::OkStatus();
}

}  // namespace stoker::format::tfrecord
