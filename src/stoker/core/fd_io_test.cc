// WriteAll / ReadAll / PreadAll / ReadToEnd / SendAll on real pipes, files and sockets, including a
// signal that interrupts a blocked read.
#include "stoker/core/fd_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

namespace stoker {
namespace {

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

TEST(FdIoTest, WriteAllAndReadAllThroughAPipeLargerThanItsBuffer) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string data = Pattern(1 << 20);  // far more than the 64 KiB pipe buffer
  std::string got(data.size(), '\0');
  ssize_t n = -1;
  std::thread reader([&] { n = ReadAll(fds[0], got.data(), got.size()); });
  EXPECT_EQ(WriteAll(fds[1], data), 0);
  reader.join();
  EXPECT_EQ(n, static_cast<ssize_t>(data.size()));
  EXPECT_EQ(got, data);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(FdIoTest, ReadAllStopsAtEndOfFileAndReadToEndTakesEverything) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(WriteAll(fds[1], "hello"), 0);
  ::close(fds[1]);
  char buf[16];
  EXPECT_EQ(ReadAll(fds[0], buf, sizeof(buf)), 5);
  EXPECT_EQ(std::string(buf, 5), "hello");
  ::close(fds[0]);

  ASSERT_EQ(::pipe(fds), 0);
  const std::string data = Pattern(200000);
  std::thread writer([&] {
    WriteAll(fds[1], data);
    ::close(fds[1]);
  });
  std::string all = "x";
  EXPECT_EQ(ReadToEnd(fds[0], &all), 0);
  writer.join();
  EXPECT_EQ(all, "x" + data);
  ::close(fds[0]);
}

TEST(FdIoTest, PreadAllReadsFromAnOffsetAndShortAtTheEnd) {
  char path[] = "/tmp/stoker-fd-io-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(WriteAll(fd, "0123456789"), 0);
  char buf[8];
  EXPECT_EQ(PreadAll(fd, buf, 4, 3), 4);
  EXPECT_EQ(std::string(buf, 4), "3456");
  EXPECT_EQ(PreadAll(fd, buf, 8, 7), 3);
  EXPECT_EQ(std::string(buf, 3), "789");
  EXPECT_EQ(PreadAll(fd, buf, 8, 100), 0);
  ::close(fd);
}

TEST(FdIoTest, ErrorsComeBackAsErrno) {
  char buf[4];
  EXPECT_EQ(ReadAll(-1, buf, sizeof(buf)), -EBADF);
  EXPECT_EQ(WriteAll(-1, "x"), EBADF);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ::close(sv[1]);
  EXPECT_EQ(SendAll(sv[0], "to a closed peer"), EPIPE);  // and no SIGPIPE
  ::close(sv[0]);
}

std::atomic<int> interrupts{0};
void CountInterrupt(int) { interrupts.fetch_add(1); }

TEST(FdIoTest, AReadInterruptedByASignalContinues) {
  // A handler without SA_RESTART, so the blocked read really returns EINTR.
  struct sigaction action = {};
  action.sa_handler = CountInterrupt;
  struct sigaction previous;
  ASSERT_EQ(::sigaction(SIGUSR1, &action, &previous), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  char buf[6];
  ssize_t n = -1;
  std::atomic<bool> started{false};
  std::thread reader([&] {
    started = true;
    n = ReadAll(fds[0], buf, sizeof(buf));
  });
  while (!started) std::this_thread::yield();
  for (int i = 0; i < 20 && interrupts.load() < 3; ++i) {
    ::pthread_kill(reader.native_handle(), SIGUSR1);
    ::usleep(10000);
  }
  ASSERT_EQ(WriteAll(fds[1], "abc"), 0);
  ::usleep(10000);
  ::pthread_kill(reader.native_handle(), SIGUSR1);
  ASSERT_EQ(WriteAll(fds[1], "def"), 0);
  reader.join();
  EXPECT_GE(interrupts.load(), 1);
  EXPECT_EQ(n, 6);
  EXPECT_EQ(std::string(buf, 6), "abcdef");
  ::sigaction(SIGUSR1, &previous, nullptr);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace stoker
