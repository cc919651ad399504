// Build information of the simulator library.
#pragma once

#include <string>

namespace safeamp::sim {

/// The Eigen version safeamp::sim was compiled against, e.g. "3.4.0".
[[nodiscard]] std::string eigen_version();

}  // namespace safeamp::sim
