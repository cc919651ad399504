// The public-name index of docs/api_reference.md, generated from the headers: every header of the core
// (include/safeamp), the simulator (sim/include) and the CUDA backend (cuda/include) with the first sentence of
// its opening comment and each name it declares at namespace scope outside `detail` and anonymous namespaces
// (types, enums, aliases, concepts, functions, variables). Members are reached through their types.
//
//   api_index <source root>                      print the page
//   api_index <source root> --check <page.md>    exit 1, naming what differs, when the page is not what the
//                                                headers give now (the docs test); exit 2 on a scanning error
//
// The scanner is a small tokenizer with a scope stack, not a C++ parser: it understands comments, string and
// character literals, preprocessor lines, namespaces, class bodies, function bodies and brace initializers, which
// is all the project's headers use at namespace scope. A header it cannot follow (unbalanced braces) is an error,
// not a silently shorter list.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct token {
  std::string text;
  bool identifier = false;
};

struct scan_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Tokens of a header: identifiers, numbers and single punctuation characters; comments, literals' contents and
/// preprocessor lines dropped ("::" stays two ':' tokens).
std::vector<token> tokenize(const std::string& s, const std::string& file) {
  std::vector<token> out;
  std::size_t i = 0;
  bool line_start = true;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      line_start = true;
      ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (line_start && c == '#') {  // a preprocessor line, with its continuations
      while (i < s.size() && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        ++i;
      }
      continue;
    }
    line_start = false;
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const std::size_t end = s.find("*/", i + 2);
      if (end == std::string::npos) throw scan_error(file + ": unterminated /* comment");
      i = end + 2;
      continue;
    }
    if (c == 'R' && i + 1 < s.size() && s[i + 1] == '"') {  // raw string R"delim( ... )delim"
      const std::size_t open = s.find('(', i + 2);
      if (open == std::string::npos) throw scan_error(file + ": malformed raw string");
      const std::string close = ")" + s.substr(i + 2, open - i - 2) + "\"";
      const std::size_t end = s.find(close, open);
      if (end == std::string::npos) throw scan_error(file + ": unterminated raw string");
      out.push_back({"\"\"", false});
      i = end + close.size();
      continue;
    }
    if (c == '"' || c == '\'') {
      std::size_t j = i + 1;
      while (j < s.size() && s[j] != c) {
        if (s[j] == '\\') ++j;
        if (s[j] == '\n') throw scan_error(file + ": unterminated literal");
        ++j;
      }
      if (j >= s.size()) throw scan_error(file + ": unterminated literal");
      out.push_back({std::string(2, c), false});
      i = j + 1;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({s.substr(i, j - i), true});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {  // numbers, digit separators and suffixes included
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == '\'' ||
                              ((s[j] == '+' || s[j] == '-') && (s[j - 1] == 'e' || s[j - 1] == 'p')))) {
        ++j;
      }
      out.push_back({s.substr(i, j - i), false});
      i = j;
      continue;
    }
    out.push_back({std::string(1, c), false});
    ++i;
  }
  return out;
}

enum class kind { type, alias, concept_, function, variable };

const char* kind_label(kind k) {
  switch (k) {
    case kind::type: return "types";
    case kind::alias: return "aliases";
    case kind::concept_: return "concepts";
    case kind::function: return "functions";
    case kind::variable: return "constants and variables";
  }
  return "?";
}

struct header_index {
  std::string purpose;
  std::map<std::string, std::map<kind, std::set<std::string>>> names;  // namespace -> kind -> names
};

bool is_word(const token& t, const char* w) { return t.identifier && t.text == w; }

/// Index of the token after the bracket that closes the one at `open` (which is '(', '[', '{' or '<').
std::size_t skip_balanced(const std::vector<token>& t, std::size_t open, const std::string& file) {
  const std::string o = t[open].text;
  const std::string c = o == "(" ? ")" : o == "[" ? "]" : o == "{" ? "}" : ">";
  int depth = 0;
  for (std::size_t i = open; i < t.size(); ++i) {
    if (t[i].text == o) ++depth;
    if (t[i].text == c && --depth == 0) return i + 1;
    // Template argument lists hold parentheses (which may hold '>'); skip those whole.
    if (o == "<" && t[i].text == "(" && i != open) i = skip_balanced(t, i, file) - 1;
  }
  throw scan_error(file + ": unbalanced '" + o + "'");
}

bool excluded_namespace(const std::vector<std::string>& ns) {
  for (const std::string& n : ns) {
    if (n.empty() || n == "detail") return true;
  }
  return ns.empty() || ns.front() != "safeamp";
}

std::string join(const std::vector<std::string>& ns) {
  std::string s;
  for (const std::string& n : ns) s += (s.empty() ? "" : "::") + n;
  return s;
}

/// Records the name a namespace-scope statement t[b, e) declares (e is at its ';' or its body's '{').
void record(header_index& idx, const std::vector<std::string>& ns, const std::vector<token>& t, std::size_t b,
            std::size_t e, const std::string& file) {
  // Leading template parameter lists and attributes.
  while (b < e) {
    if (is_word(t[b], "template") && b + 1 < e && t[b + 1].text == "<") {
      b = skip_balanced(t, b + 1, file);
    } else if (t[b].text == "[" && b + 1 < e && t[b + 1].text == "[") {
      b = skip_balanced(t, b, file);
    } else {
      break;
    }
  }
  if (b >= e) return;
  if (is_word(t[b], "static_assert") || is_word(t[b], "friend") || is_word(t[b], "extern")) return;
  if (is_word(t[b], "using")) {
    if (b + 2 < e && t[b + 1].identifier && t[b + 2].text == "=") idx.names[join(ns)][kind::alias].insert(t[b + 1].text);
    return;  // using-declarations and using-directives declare nothing new
  }
  if (is_word(t[b], "concept") && b + 1 < e) {
    idx.names[join(ns)][kind::concept_].insert(t[b + 1].text);
    return;
  }
  for (std::size_t i = b; i < e; ++i) {
    if (t[i].text == "(" || t[i].text == "=") break;
    if (is_word(t[i], "struct") || is_word(t[i], "class") || is_word(t[i], "union") || is_word(t[i], "enum")) {
      std::size_t n = i + 1;
      if (is_word(t[n], "class") || is_word(t[n], "struct")) ++n;  // enum class
      while (n < e && t[n].text == "[") n = skip_balanced(t, n, file);
      if (n < e && t[n].identifier && !is_word(t[n], "alignas")) idx.names[join(ns)][kind::type].insert(t[n].text);
      return;
    }
  }
  // A variable (an '=' or a brace initializer before any parameter list) or a function (a name before '(').
  // The name is the identifier before the first '(' / '=' / '{' outside template argument lists.
  std::size_t i = b;
  std::string last;
  while (i < e) {
    const std::string& x = t[i].text;
    if (x == "<" && !last.empty() && last != "operator") {
      i = skip_balanced(t, i, file);
      continue;
    }
    if (x == "(" || x == "=" || x == "{" || x == ";") break;
    if (is_word(t[i], "operator")) return;  // operators are found through their types
    if (t[i].identifier) last = x;
    ++i;
  }
  if (last.empty() || last.front() == '_') return;
  // A declaration like `alignas(64) T name[...]` or a macro call has no usable name; those are not used here.
  const bool function = i < t.size() && t[i].text == "(";
  const bool keyword = last == "inline" || last == "constexpr" || last == "static" || last == "const";
  if (keyword) return;
  idx.names[join(ns)][function ? kind::function : kind::variable].insert(last);
}

/// The names a header declares at namespace scope in namespace safeamp (and nested ones but detail).
header_index scan(const std::string& text, const std::string& file) {
  header_index idx;
  // Purpose: the first sentence of the opening // comment block.
  std::istringstream lines(text);
  std::string line, comment;
  while (std::getline(lines, line)) {
    if (line.rfind("//", 0) != 0) break;
    std::string body = line.substr(2);
    if (!body.empty() && body.front() == ' ') body.erase(0, 1);
    comment += (comment.empty() ? "" : " ") + body;
  }
  // The first sentence ends at a '.' followed by a space and a capital letter or a backquote ("e.g. the" goes on).
  std::size_t stop = std::string::npos;
  for (std::size_t k = 0; k + 2 < comment.size(); ++k) {
    if (comment[k] == '.' && comment[k + 1] == ' ' &&
        (std::isupper(static_cast<unsigned char>(comment[k + 2])) || comment[k + 2] == '`')) {
      stop = k;
      break;
    }
  }
  idx.purpose = stop == std::string::npos ? comment : comment.substr(0, stop + 1);
  if (idx.purpose.empty()) throw scan_error(file + ": no opening comment saying what the header is for");

  const std::vector<token> t = tokenize(text, file);
  // Scope stack: a namespace (its name pieces) or an opaque body that is skipped.
  std::vector<std::vector<std::string>> namespaces{{}};
  std::vector<std::size_t> namespace_depths;  // how many names each 'namespace ... {' pushed
  std::size_t i = 0, statement = 0;
  while (i < t.size()) {
    const std::string& x = t[i].text;
    if (x == "}") {  // closes a namespace (bodies are skipped whole below)
      if (namespace_depths.empty()) throw scan_error(file + ": '}' without an open namespace");
      for (std::size_t k = 0; k < namespace_depths.back(); ++k) namespaces.back().pop_back();
      namespace_depths.pop_back();
      statement = ++i;
      continue;
    }
    if (is_word(t[i], "namespace") && i == statement) {
      std::vector<std::string> names;
      std::size_t j = i + 1;
      while (j < t.size() && t[j].text != "{" && t[j].text != "=") {
        if (t[j].identifier && !is_word(t[j], "inline")) names.push_back(t[j].text);
        ++j;
      }
      if (j >= t.size()) throw scan_error(file + ": namespace without a body");
      if (t[j].text == "=") {  // namespace alias
        while (j < t.size() && t[j].text != ";") ++j;
        statement = i = j + 1;
        continue;
      }
      if (names.empty()) names.push_back("");  // anonymous
      for (const std::string& n : names) namespaces.back().push_back(n);
      namespace_depths.push_back(names.size());
      statement = i = j + 1;
      continue;
    }
    if (is_word(t[i], "extern") && i + 1 < t.size() && t[i + 1].text == "\"\"" && i + 2 < t.size() &&
        t[i + 2].text == "{") {
      throw scan_error(file + ": extern \"C\" blocks are not indexed");
    }
    if (x == ";") {
      if (!excluded_namespace(namespaces.back())) record(idx, namespaces.back(), t, statement, i, file);
      statement = ++i;
      continue;
    }
    if (x == "(" || x == "[") {  // parameter lists, attributes, lambdas' captures: skip whole
      i = skip_balanced(t, i, file);
      continue;
    }
    if (x == "{") {
      // A body (class, enum, function) or a brace initializer; either way it is skipped whole. What the statement
      // declares is decided from the tokens before it; a class or function body ends the statement, an
      // initializer does not (the ';' after it does).
      // An '=' counts only outside parameter lists (default arguments) and template parameter lists.
      bool has_eq = false, has_paren = false, has_class = false;
      for (std::size_t k = statement; k < i;) {
        if (is_word(t[k], "template") && k + 1 < i && t[k + 1].text == "<") {
          k = skip_balanced(t, k + 1, file);
          continue;
        }
        if (t[k].text == "(" || t[k].text == "[") {
          has_paren = has_paren || t[k].text == "(";
          k = skip_balanced(t, k, file);
          continue;
        }
        if (t[k].text == "=") has_eq = true;
        if (is_word(t[k], "struct") || is_word(t[k], "class") || is_word(t[k], "union") || is_word(t[k], "enum")) {
          has_class = true;
        }
        ++k;
      }
      const bool body = has_class || (has_paren && !has_eq);
      const std::size_t after = skip_balanced(t, i, file);
      if (body) {
        if (!excluded_namespace(namespaces.back())) record(idx, namespaces.back(), t, statement, i, file);
        i = after;
        if (i < t.size() && t[i].text == ";") ++i;  // `struct x { ... };`
        statement = i;
        // `struct x {...} name;` does not occur in the headers: a declarator after the body would be lost.
      } else {
        i = after;  // an initializer: the statement goes on to its ';'
      }
      continue;
    }
    ++i;
  }
  if (!namespace_depths.empty()) throw scan_error(file + ": a namespace is not closed");
  return idx;
}

std::string render(const fs::path& root) {
  struct section {
    const char* title;
    const char* dir;
    const char* note;
  };
  const std::vector<section> sections = {
      {"Core", "include", "`#include` from `include/`; C++20 standard library only, host and device."},
      {"Simulator", "sim/include", "link `safeamp::sim` (Eigen, nlohmann/json, zlib)."},
      {"CUDA backend", "cuda/include", "link `safeamp::cuda` (CUDA toolkit, cuBLASLt); built where nvcc is found."},
  };
  std::ostringstream out;
  out << "# API reference: every public name, by header\n\n"
         "Generated from the headers by `tests/docs/api_index.cpp`; the `docs_api_reference` test fails when this "
         "page and the\nheaders disagree. Regenerate it with `scripts/api-docs`. The map of what to use for what is "
         "[api.md](api.md);\nthis page lists each name a header declares at namespace scope (outside `detail`), so "
         "that nothing public is\nundocumented. Members are found through their types.\n";
  for (const section& s : sections) {
    const fs::path base = root / s.dir;
    std::vector<fs::path> headers;
    for (const auto& e : fs::recursive_directory_iterator(base)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".hpp" || ext == ".cuh")) headers.push_back(e.path());
    }
    std::sort(headers.begin(), headers.end());
    out << "\n## " << s.title << " (" << headers.size() << " headers)\n\n" << s.note << "\n";
    for (const fs::path& h : headers) {
      std::ifstream in(h, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      const std::string rel = fs::relative(h, base).generic_string();
      const header_index idx = scan(text.str(), (fs::path(s.dir) / rel).generic_string());
      out << "\n### `" << rel << "`\n\n" << idx.purpose << "\n";
      if (idx.names.empty()) out << "\n- (no names of its own: it includes others, or holds only `detail` code)\n";
      for (const auto& [ns, kinds] : idx.names) {
        for (const auto& [k, names] : kinds) {
          out << "\n- " << kind_label(k) << " (`" << ns << "`):";
          bool first = true;
          for (const std::string& n : names) {
            out << (first ? " " : ", ") << '`' << n << '`';
            first = false;
          }
        }
      }
      out << (idx.names.empty() ? "" : "\n");
    }
  }
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--check")) {
    std::cerr << "usage: api_index <source root> [--check <page.md>]\n";
    return 2;
  }
  std::string page;
  try {
    page = render(argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "api_index: " << e.what() << "\n";
    return 2;
  }
  if (argc == 2) {
    std::cout << page;
    return 0;
  }
  std::ifstream in(argv[3], std::ios::binary);
  if (!in) {
    std::cerr << "api_index: cannot read " << argv[3] << "\n";
    return 2;
  }
  std::stringstream committed;
  committed << in.rdbuf();
  if (committed.str() == page) {
    std::cout << "api_index: " << argv[3] << " lists every public name of the headers\n";
    return 0;
  }
  // Name the first lines that differ, so the failure says what changed.
  std::istringstream a(committed.str()), b(page);
  std::string la, lb;
  int n = 0, shown = 0;
  while (shown < 10) {
    const bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    ++n;
    if (!ga && !gb) break;
    if (!ga) la = "(end of file)";
    if (!gb) lb = "(end of file)";
    if (la != lb) {
      std::cerr << "line " << n << ":\n  page:    " << la << "\n  headers: " << lb << "\n";
      ++shown;
    }
  }
  std::cerr << "api_index: " << argv[3] << " is not what the headers declare now; regenerate it with scripts/api-docs\n";
  return 1;
}
