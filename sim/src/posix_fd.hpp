// A file descriptor closed when its scope ends (the POSIX readers and writers of report_files.cpp and
// report_invocation.cpp). Internal to the simulator's sources.
#pragma once

#include <unistd.h>

namespace safeamp::sim::detail {

struct fd_closer {
  int fd;
  ~fd_closer() { ::close(fd); }
};

}  // namespace safeamp::sim::detail
