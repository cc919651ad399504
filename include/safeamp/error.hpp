// safeamp::error: the one exception type of the library. Validation at a boundary throws it with the
// field, the offending value and what is accepted; library code never calls exit() or abort().
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace safeamp {

class error : public std::runtime_error {
 public:
  explicit error(const std::string& message) : std::runtime_error(message) {}

  /// "<field> is <value>; accepted: <accepted>"
  error(std::string_view field, std::string_view value, std::string_view accepted)
      : std::runtime_error(std::string(field) + " is " + std::string(value) + "; accepted: " + std::string(accepted)),
        field_(field) {}

  /// Name of the field that was rejected (empty when the error is not about one field).
  [[nodiscard]] const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

}  // namespace safeamp
