#include "stoker/format/shard_index.h"

#include <algorithm>
#include <memory>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::format {

void LoadShardIndexAsync(io::RangedReader& reader, std::string key, std::string url, uint64_t size,
                         absl::AnyInvocable<void(absl::StatusOr<ShardIndex>) &&> done) {
  if (size < shard::kHeaderSize + shard::kFooterSize) {
    std::move(done)(absl::DataLossError(
        StrCat(url, ": truncated shard: ", size, " bytes is less than a header and a footer")));
    return;
  }
  uint64_t tail_length = std::min(size, kShardTailBytes);
  uint64_t tail_offset = size - tail_length;
  // The header is checked too, before any sample is served: in the tail when the shard is small,
  // else with a 16-byte read at offset 0 in the same call.
  std::vector<io::ByteRange> ranges;
  if (tail_offset > 0) ranges.push_back(io::ByteRange{0, shard::kHeaderSize});
  ranges.push_back(io::ByteRange{tail_offset, tail_length});
  reader.ReadRangesAsync(
      key, std::move(ranges), "",
      [&reader, key, url, size, tail_offset, tail_length,
       done = std::move(done)](absl::StatusOr<std::vector<Buffer>> result) mutable {
        if (!result.ok()) {
          absl::Status status = result.status();
          if (absl::IsOutOfRange(status)) {
            status = absl::FailedPreconditionError(
                StrCat(url, ": the shard is shorter than the ", size,
                       " bytes the manifest lists (truncated? re-run `stoker convert`)"));
          }
          std::move(done)(Annotate(status, StrCat("reading the index of ", url)));
          return;
        }
        Buffer tail = std::move(result->back());
        if (tail.size() != tail_length) {
          std::move(done)(absl::FailedPreconditionError(
              StrCat(url, ": the shard has ", tail_offset + tail.size(), " bytes, not the ", size,
                     " the manifest lists (truncated? re-run `stoker convert`)")));
          return;
        }
        absl::Status header = shard::CheckHeader(
            (tail_offset > 0 ? result->front() : tail).view().substr(0, shard::kHeaderSize), url);
        if (!header.ok()) {
          std::move(done)(header);
          return;
        }
        auto footer =
            shard::ParseFooter(tail.view().substr(tail.size() - shard::kFooterSize), size, url);
        if (!footer.ok()) {
          std::move(done)(footer.status());
          return;
        }
        if (footer->index_offset >= tail_offset) {
          ShardIndex out{*footer,
                         tail.Slice(footer->index_offset - tail_offset, footer->index_length)};
          std::move(done)(std::move(out));
          return;
        }
        shard::Footer f = *footer;
        reader.ReadRangesAsync(
            key, {io::ByteRange{f.index_offset, f.index_length}}, "",
            [url, f, done = std::move(done)](absl::StatusOr<std::vector<Buffer>> result) mutable {
              if (!result.ok()) {
                std::move(done)(Annotate(result.status(), StrCat("reading the index of ", url)));
                return;
              }
              if ((*result)[0].size() != f.index_length) {
                std::move(done)(absl::DataLossError(StrCat(url, ": short read of the index")));
                return;
              }
              std::move(done)(ShardIndex{f, std::move((*result)[0])});
            });
      });
}

}  // namespace stoker::format
