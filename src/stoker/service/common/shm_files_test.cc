#include "stoker/service/common/shm_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "stoker/core/mapped_files.h"

namespace stoker::service {
namespace {

// A 1 MiB file with distinct bytes, mapped and registered as a worker's local store maps shards.
class MappedTestFile {
 public:
  MappedTestFile() {
    char path[] = "/tmp/stoker-shm-files-XXXXXX";
    fd_ = ::mkstemp(path);
    path_ = path;
    std::string bytes(kSize, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + i / 4096);
    EXPECT_EQ(::write(fd_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    struct stat st {};
    ::fstat(fd_, &st);
    inode_ = st.st_ino;
    device_ = st.st_dev;
    base_ = static_cast<const uint8_t*>(::mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd_, 0));
    RegisterMappedFile(base_, kSize, fd_, device_, inode_);
    // Slices keep this object's mapping alive in real use; here the test outlives them.
    mapping_ = Buffer::Wrap(std::shared_ptr<const void>(base_, [](const void*) {}), base_, kSize);
  }
  ~MappedTestFile() {
    UnregisterMappedFile(base_);
    ::munmap(const_cast<uint8_t*>(base_), kSize);
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  static constexpr size_t kSize = 1 << 20;
  Buffer Slice(size_t offset, size_t length) const { return mapping_.Slice(offset, length); }
  uint64_t inode() const { return inode_; }

 private:
  int fd_ = -1;
  std::string path_;
  uint64_t inode_ = 0, device_ = 0;
  const uint8_t* base_ = nullptr;
  Buffer mapping_;
};

TEST(SharedFiles, LargeRangesOfMappedFilesBecomeSpansAndMapAgainAsTheSameBytes) {
  MappedTestFile file;
  const Buffer big = file.Slice(4096 + 3, 100 << 10);
  const Buffer small = file.Slice(0, 1024);  // below kMinSharedFileBytes: copied
  const std::vector<Buffer> pieces = {Buffer::Copy("header"), big, Buffer::Copy("pad"), small,
                                      file.Slice(200 << 10, 64 << 10)};
  SharedFileTable table;
  SharedFileTable::Split split = table.SplitPayload(pieces);
  ASSERT_EQ(split.copied.size(), 3u);
  EXPECT_EQ(split.copied_size, 6u + 3u + 1024u);
  ASSERT_EQ(split.spans.size(), 4u);
  EXPECT_EQ(split.spans[0].file(), 0);
  EXPECT_EQ(split.spans[0].length(), 6);
  EXPECT_EQ(split.spans[1].file(), 1);
  EXPECT_EQ(split.spans[1].offset(), 4096 + 3);
  EXPECT_EQ(split.spans[1].length(), 100 << 10);
  EXPECT_EQ(split.spans[2].file(), 0);  // "pad" and the small slice: one span of the slot
  EXPECT_EQ(split.spans[2].length(), 3 + 1024);
  EXPECT_EQ(split.spans[3].file(), 1);  // the same file: the same entry
  EXPECT_EQ(split.spans[3].offset(), 200 << 10);
  GetElementsResponse fields;
  table.AddTo(&fields);
  ASSERT_EQ(fields.shm_files_size(), 1);
  const SharedFile& shared = fields.shm_files(0);
  EXPECT_EQ(shared.pid(), ::getpid());
  EXPECT_EQ(static_cast<uint64_t>(shared.inode()), file.inode());
  EXPECT_EQ(shared.size(), static_cast<int64_t>(MappedTestFile::kSize));

  // The consumer's side (this process stands in for it: /proc/self/fd/N is the same file).
  SharedFileMappings mappings;
  auto range = mappings.Range(shared, 4096 + 3, 100 << 10);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->view(), big.view());
  EXPECT_NE(range->data(), big.data());  // a mapping of the consumer's own
  auto again = mappings.Range(shared, 0, 10);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data() + 4096 + 3, range->data());  // the same mapping, made once
  // A range outside the file is the worker's fault: DataLoss; a file that is not the one named
  // (another inode, or cut shorter than named) cannot be mapped: Unavailable.
  EXPECT_EQ(mappings.Range(shared, MappedTestFile::kSize - 5, 6).status().code(),
            absl::StatusCode::kDataLoss);
  SharedFile other = shared;
  other.set_inode(shared.inode() + 1);
  EXPECT_EQ(mappings.Range(other, 0, 10).status().code(), absl::StatusCode::kUnavailable);
  SharedFile longer = shared;
  longer.set_size(shared.size() + 1);
  auto refused = SharedFileMappings().Range(longer, 0, 10);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("/proc/"), std::string::npos) << refused.status();
}

TEST(SharedFiles, PayloadsWithoutMappedRangesHaveNoSpans) {
  SharedFileTable table;
  const Buffer heap = Buffer::Copy(std::string(200 << 10, 'x'));  // large, but not a file's
  SharedFileTable::Split split = table.SplitPayload({Buffer::Copy("header"), heap});
  EXPECT_TRUE(split.spans.empty());
  EXPECT_EQ(split.copied.size(), 2u);
  EXPECT_EQ(split.copied_size, 6u + (200u << 10));
  GetElementsResponse fields;
  table.AddTo(&fields);
  EXPECT_EQ(fields.shm_files_size(), 0);
}

}  // namespace
}  // namespace stoker::service
