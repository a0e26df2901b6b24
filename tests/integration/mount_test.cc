// `stoker mount` of a bucket on the Swift S3 server, used through the kernel by cat, dd, cmp and
// Python, as a training script would. Needs /dev/fuse and fusermount3 (fails, not skips, without).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/io/url.h"
#include "stoker/testing/s3_server.h"
#include "stoker/testing/subprocess.h"

namespace stoker {
namespace {

constexpr int kManyObjects = 10'000;  // in many/: the ls test; the first 2,000 are read in parallel
constexpr int kMemObjects = 100;      // in mem/: 2 MiB each, all open at once

std::string Stoker() { return StrCat(STOKER_TEST_BINARY_DIR, "/stoker"); }

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937_64 gen(seed);
  std::string s(size + 8, '\0');
  for (size_t i = 0; i + 8 <= s.size(); i += 8) {
    uint64_t w = gen();
    std::memcpy(s.data() + i, &w, 8);
  }
  s.resize(size);
  return s;
}

std::string ManyName(int i) {
  char name[32];
  std::snprintf(name, sizeof(name), "many/f%05d.bin", i);
  return name;
}

// Runs `command` through bash; returns its output, failing the test on a non-zero exit.
std::string Shell(const std::string& command) {
  auto result = testing::RunCommandOk({"bash", "-c", command});
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : "";
}

class MountTest : public testing::S3ServerTest {
 protected:
  static inline std::string dir_;      // local copies of what was uploaded
  static inline std::string mnt_;      // the mount of s3://mnt
  static inline std::string mem_mnt_;  // s3://mnt/mem with a 64 MiB cache
  static inline bool ready_ = false;

  void SetUp() override {
    ASSERT_EQ(::access("/dev/fuse", R_OK | W_OK), 0)
        << "/dev/fuse is missing or not usable: `stoker mount` cannot be tested on this machine "
           "(load the fuse module / run the container with --device /dev/fuse)";
    S3ServerTest::SetUp();
    if (HasFatalFailure() || ready_) return;
    ASSERT_TRUE(s3().CreateBucket("mnt").ok());
    auto dir = testing::MakeTempDir("stoker-mount-test");
    ASSERT_TRUE(dir.ok());
    dir_ = *dir;
    Shell(StrCat("mkdir -p ", dir_, "/local/many ", dir_, "/local/mem ", dir_, "/local/dir/nested ",
                 dir_, "/mnt ", dir_, "/memmnt"));
    Upload();
    if (HasFatalFailure()) return;
    mnt_ = dir_ + "/mnt";
    mem_mnt_ = dir_ + "/memmnt";
    // The command returns once the mount is ready: no wait needed before using it.
    Shell(StrCat(Stoker(), " mount s3://mnt ", mnt_));
    Shell(StrCat(Stoker(), " mount s3://mnt/mem ", mem_mnt_, " --cache-size 64M"));
    ready_ = true;
  }

  static void TearDownTestSuite() {
    if (!mnt_.empty()) std::system(StrCat("fusermount3 -u ", mnt_).c_str());
    if (!mem_mnt_.empty()) std::system(StrCat("fusermount3 -u ", mem_mnt_).c_str());
    if (!dir_.empty()) std::system(StrCat("rm -rf ", dir_).c_str());
  }

  // Uploads with stoker's own S3 store from 16 threads, keeping local copies to compare against.
  void Upload() {
    auto target = io::OpenUrl("s3://mnt/");
    ASSERT_TRUE(target.ok()) << target.status();
    std::shared_ptr<io::ObjectStore> store = target->store;
    struct Object {
      std::string key;
      std::string bytes;
    };
    std::vector<Object> objects;
    objects.push_back({"big.bin", RandomBytes((48 << 20) + 12345, 1)});
    objects.push_back({"small.txt", "hello, mount\n"});
    objects.push_back({"dir/nested/deep.bin", RandomBytes(300'000, 2)});
    for (int i = 0; i < kManyObjects; ++i) {
      objects.push_back({ManyName(i), RandomBytes(1000 + (i * 7919) % 9000, 100 + i)});
    }
    for (int i = 0; i < kMemObjects; ++i) {
      objects.push_back({StrCat("mem/m", i, ".bin"), RandomBytes(2 << 20, 20000 + i)});
    }
    for (const Object& o : objects) {
      std::string path = StrCat(dir_, "/local/", o.key);
      std::ofstream(path, std::ios::binary).write(o.bytes.data(), o.bytes.size());
    }
    std::atomic<size_t> next{0};
    std::atomic<int> failures{0};
    std::string first_error;
    std::vector<std::thread> threads;
    threads.reserve(16);
    for (int t = 0; t < 16; ++t) {
      threads.push_back(StartThread("upload", [&] {
        for (size_t i; (i = next.fetch_add(1)) < objects.size();) {
          absl::Status put = store->Put(objects[i].key, Buffer::Copy(objects[i].bytes));
          if (!put.ok() && failures.fetch_add(1) == 0) first_error = put.ToString();
        }
      }));
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(failures.load(), 0) << first_error;
  }
};

TEST_F(MountTest, LargeAndSmallFilesAreByteExactThroughCatDdCmpAndPython) {
  Shell(StrCat("cmp ", dir_, "/local/big.bin ", mnt_, "/big.bin"));
  Shell(StrCat("cat ", mnt_, "/big.bin | cmp - ", dir_, "/local/big.bin"));
  Shell(StrCat("dd if=", mnt_, "/big.bin bs=4M status=none | cmp - ", dir_, "/local/big.bin"));
  Shell(StrCat("dd if=", mnt_, "/big.bin bs=1M skip=7 count=5 status=none | cmp - <(dd if=", dir_,
               "/local/big.bin bs=1M skip=7 count=5 status=none)"));
  EXPECT_EQ(Shell(StrCat("cat ", mnt_, "/small.txt")), "hello, mount\n");
  Shell(StrCat("cmp ", dir_, "/local/dir/nested/deep.bin ", mnt_, "/dir/nested/deep.bin"));
  std::string py = StrCat(
      "import sys\n"
      "for name in ['big.bin', 'small.txt', 'dir/nested/deep.bin', 'many/f00042.bin']:\n"
      "    a = open('",
      mnt_,
      "/' + name, 'rb').read()\n"
      "    b = open('",
      dir_,
      "/local/' + name, 'rb').read()\n"
      "    assert a == b, name\n"
      "print('ok')\n");
  EXPECT_EQ(Shell(StrCat("python3 -c \"", py, "\"")), "ok\n");
}

TEST_F(MountTest, RandomPreadsMatch) {
  std::string py = StrCat(
      "import os, random\n"
      "random.seed(5)\n"
      "a = os.open('",
      mnt_,
      "/big.bin', os.O_RDONLY)\n"
      "b = open('",
      dir_,
      "/local/big.bin', 'rb').read()\n"
      "for i in range(300):\n"
      "    off = random.randrange(len(b) + 10)\n"
      "    n = random.choice([1, 100, 4096, 70000, 1 << 20, 3 << 20])\n"
      "    assert os.pread(a, n, off) == b[off:off + n], (off, n)\n"
      "print('ok')\n");
  EXPECT_EQ(Shell(StrCat("python3 -c \"", py, "\"")), "ok\n");
}

TEST_F(MountTest, EightParallelReadersOf2000SmallFiles) {
  // 8 reader processes, 250 files each.
  std::string script = StrCat("cd ", mnt_, "/many && ls | head -2000 | xargs -P 8 -n 250 sh -c ",
                              "'for f; do cmp \"$f\" ", dir_,
                              "/local/many/\"$f\" || exit 1; done' _", " && echo ok");
  EXPECT_EQ(Shell(script), "ok\n");
}

TEST_F(MountTest, LsOfTenThousandObjects) {
  EXPECT_EQ(Shell(StrCat("ls ", mnt_, "/many | wc -l")), StrCat(kManyObjects, "\n"));
  EXPECT_EQ(Shell(StrCat("ls ", mnt_)), "big.bin\ndir\nmany\nmem\nsmall.txt\n");
  // stat comes from the listing.
  EXPECT_EQ(Shell(StrCat("stat -c %s ", mnt_, "/many/f00003.bin")),
            StrCat(1000 + (3 * 7919) % 9000, "\n"));
  auto missing = testing::RunCommand({"ls", mnt_ + "/no-such-file"});
  ASSERT_TRUE(missing.ok());
  EXPECT_NE(missing->exit_code, 0);
  EXPECT_NE(missing->output.find("No such file"), std::string::npos) << missing->output;
}

TEST_F(MountTest, WritesAreRefusedWithErofs) {
  std::string py = StrCat(
      "import errno, os\n"
      "for path, flags in [('",
      mnt_,
      "/new.txt', os.O_WRONLY | os.O_CREAT),\n"
      "                    ('",
      mnt_,
      "/small.txt', os.O_RDWR)]:\n"
      "    try:\n"
      "        os.open(path, flags)\n"
      "        print('opened', path)\n"
      "    except OSError as e:\n"
      "        assert e.errno == errno.EROFS, e\n"
      "for f in [os.mkdir, os.remove]:\n"
      "    try:\n"
      "        f('",
      mnt_,
      "/small.txt')\n"
      "    except OSError as e:\n"
      "        assert e.errno in (errno.EROFS, errno.EEXIST), e\n"
      "print('ok')\n");
  EXPECT_EQ(Shell(StrCat("python3 -c \"", py, "\"")), "ok\n");
}

TEST_F(MountTest, MemoryBudgetHoldsWith100FilesOpen) {
  // 100 files of 2 MiB open at once, read interleaved in 128 KiB steps through a mount with a
  // 64 MiB cache; the mount process's peak RSS must stay near the budget, not 100 × read-ahead.
  std::string py = StrCat(
      "import os\n"
      "fds = [os.open('",
      mem_mnt_, "/m%d.bin' % i, os.O_RDONLY) for i in range(", kMemObjects,
      ")]\n"
      "local = [open('",
      dir_, "/local/mem/m%d.bin' % i, 'rb').read() for i in range(", kMemObjects,
      ")]\n"
      "step = 128 << 10\n"
      "for off in range(0, 2 << 20, step):\n"
      "    for i, fd in enumerate(fds):\n"
      "        assert os.pread(fd, step, off) == local[i][off:off + step], (i, off)\n"
      "print('ok')\n");
  EXPECT_EQ(Shell(StrCat("python3 -c \"", py, "\"")), "ok\n");
  std::string hwm = Shell(StrCat("pid=$(pgrep -o -f -- 'stoker mount s3://mnt/mem '); ",
                                 "awk '/VmHWM/ {print $2}' /proc/$pid/status"));
  uint64_t peak_kib = std::strtoull(hwm.c_str(), nullptr, 10);
  std::printf("mount process peak RSS with %d files open, 64 MiB cache: %.1f MiB\n", kMemObjects,
              peak_kib / 1024.0);
  ASSERT_GT(peak_kib, 0u) << hwm;
  // pgrep -o: the oldest match is the mount, not the shell running pgrep. Budget (64 MiB) plus
  // the fixed footprint; 100 × 64 MiB of read-ahead would be far above.
  EXPECT_LT(peak_kib, 256u * 1024) << "peak RSS " << peak_kib << " KiB";
}

}  // namespace
}  // namespace stoker
