// The report's "Data parallel" section: present only for a data-parallel invocation, and its table holds the
// numbers of the summary data_parallel.json is written from (each row's errors in N order, then its floor).
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "../report/report_fixtures.hpp"
#include "safeamp/sim/data_parallel.hpp"
#include "safeamp/sim/report.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {
std::string cell(double v) {  // the report's cells: 3 significant digits in exponent form
  char buf[32];
  std::snprintf(buf, sizeof buf, "<td>%.2e</td>", v);
  return buf;
}
}  // namespace

TEST_CASE("the HTML report shows the data-parallel section only for a data-parallel run", "[data_parallel]") {
  sim_summary s = fixtures::make_summary();
  const std::string plain = render_html_report(s);
  CHECK(plain.find("Data parallel") == std::string::npos);
  CHECK(plain.find("id=\"data_parallel\"") == std::string::npos);

  s.data_parallel = summarize_data_parallel(
      {.ranks = 2, .config = {.micro_batches = 4, .reduction = parse_reduce_spec("bf16-ring", "r")}});
  const data_parallel_summary& d = *s.data_parallel;
  REQUIRE(d.rank_counts.size() == 11);  // N = 1, 2, 4, ..., 1024
  REQUIRE(d.table.size() == 12 * d.rank_counts.size());  // 4 wire formats x 3 orders
  const std::string html = render_html_report(s);
  const std::size_t section = html.find("<h2 id=\"data_parallel\">Data parallel</h2>");
  REQUIRE(section != std::string::npos);
  CHECK(html.find("href=\"#data_parallel\"") != std::string::npos);
  CHECK(html.find("2 rank(s), 4 micro-batches", section) != std::string::npos);
  CHECK(html.find("<b>bf16-ring</b>", section) != std::string::npos);
  CHECK(html.find("<th>N=1024</th>", section) != std::string::npos);
  // Row by row: the spec, then its error at every N in order, then the one-rounding floor.
  const std::size_t specs = d.table.size() / d.rank_counts.size();
  std::size_t at = section;
  for (std::size_t si = 0; si < specs; ++si) {
    INFO("row " << d.table[si].spec);
    at = html.find("<tr><td>" + d.table[si].spec + "</td>", at);
    REQUIRE(at != std::string::npos);
    const std::size_t row_end = html.find("</tr>", at);
    for (std::size_t ni = 0; ni < d.rank_counts.size(); ++ni) {
      const reduction_error_row& r = d.table[ni * specs + si];
      CHECK(r.spec == d.table[si].spec);
      CHECK(r.ranks == d.rank_counts[ni]);
      at = html.find(cell(r.relative_error), at);
      REQUIRE(at < row_end);
    }
    at = html.find(cell(d.table[(d.rank_counts.size() - 1) * specs + si].floor), at);
    CHECK(at < row_end);
  }
  // The numbers are the table's: bf16 ring at 1024 ranks is far above bf16 fp32-accumulation (the stagnation).
  CHECK(d.table[(d.rank_counts.size() - 1) * specs + 1].spec == "bf16-ring");
  CHECK(d.table[(d.rank_counts.size() - 1) * specs + 1].relative_error >
        10.0 * d.table[(d.rank_counts.size() - 1) * specs + 0].relative_error);
  CHECK(html.find("Reduction error vs ranks", section) != std::string::npos);  // the chart
}
