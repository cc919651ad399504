// Build information of safeamp::sim (Eigen version it was compiled with).
#include "safeamp/sim/sim_info.hpp"

#include <Eigen/Core>
#include <string>

namespace safeamp::sim {

std::string eigen_version() {
  return std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION);
}

}  // namespace safeamp::sim
