#include "cli/config_file.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <vector>

#include "cli/suggest.h"

namespace kvgov::cli {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// Drops a trailing comment, minding '#' inside quoted strings.
std::string_view StripComment(std::string_view line) {
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '"' && (i == 0 || line[i - 1] != '\\')) quoted = !quoted;
    if (line[i] == '#' && !quoted) return line.substr(0, i);
  }
  return line;
}

// One scalar: "string", integer, number, true or false. Returns its length
// in `text`, or 0 when `text` does not start with one.
size_t ScalarLength(std::string_view text) {
  if (text.empty()) return 0;
  if (text.front() == '"') {
    for (size_t i = 1; i < text.size(); ++i) {
      if (text[i] == '\\') {
        ++i;
      } else if (text[i] == '"') {
        return i + 1;
      }
    }
    return 0;  // unterminated
  }
  for (std::string_view word : {"true", "false"}) {
    if (text.substr(0, word.size()) == word) return word.size();
  }
  size_t i = 0;
  if (text[i] == '-' || text[i] == '+') ++i;
  const size_t digits = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             text[i] == '_' || text[i] == 'e' || text[i] == 'E')) {
    ++i;
  }
  return i > digits ? i : 0;
}

Status CheckValue(std::string_view value) {
  if (value.empty()) return Status::InvalidArgument("the value is missing");
  if (value.front() == '[') {
    if (value.back() != ']') return Status::InvalidArgument("the array is not closed");
    std::string_view rest = Trim(value.substr(1, value.size() - 2));
    while (!rest.empty()) {
      const size_t length = ScalarLength(rest);
      if (length == 0) return Status::InvalidArgument("an array element is not a value");
      rest = Trim(rest.substr(length));
      if (rest.empty()) break;
      if (rest.front() != ',') return Status::InvalidArgument("want ',' between array elements");
      rest = Trim(rest.substr(1));
    }
    return Status::Ok();
  }
  const size_t length = ScalarLength(value);
  if (length == 0) {
    return Status::InvalidArgument(value.front() == '"' ? "the string is not closed"
                                                        : "want a quoted string, a number, "
                                                          "true, false or an array");
  }
  if (length != value.size()) return Status::InvalidArgument("text after the value");
  return Status::Ok();
}

// True for a plain decimal number, which the checker and CLI11 read back
// bare; anything else (exponents, hex) is written as a quoted string, which
// CLI11 converts all the same.
bool IsPlainNumber(std::string_view text) {
  size_t i = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  if (i == text.size() || !std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  bool dot = false;
  for (; i < text.size(); ++i) {
    if (text[i] == '.' && !dot) {
      dot = true;
    } else if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      return false;
    }
  }
  return true;
}

bool IsNumericType(const std::string& type) {
  for (std::string_view prefix : {"INT", "UINT", "FLOAT", "NUMBER"}) {
    if (type.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

Result<std::string> FormatValue(const std::string& key, const std::string& value, bool numeric) {
  if (numeric && IsPlainNumber(value)) return value;
  for (char c : value) {
    if (c == '"' || c == '#' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Status::InvalidArgument(key +
                                     ": the value holds a double quote, a '#' or a "
                                     "control character, which a kvgov config file cannot hold");
    }
  }
  if (!value.empty() && value.back() == '\\') {
    return Status::InvalidArgument(key +
                                   ": a value may not end in a backslash in a kvgov "
                                   "config file");
  }
  return "\"" + value + "\"";
}

}  // namespace

Result<std::string> FormatConfigSection(const CLI::App& section) {
  std::string out = "# kvgov " + section.get_name() +
                    ": effective settings (command line over --config file over defaults)\n"
                    "[" +
                    section.get_name() + "]\n";
  for (const CLI::Option* option : section.get_options()) {
    if (!option->get_configurable() || option->get_lnames().empty()) continue;
    const std::string& key = option->get_lnames().front();
    std::vector<std::string> values = option->reduced_results();
    if (option->count() == 0 && values.empty() && !option->get_default_str().empty()) {
      values = {option->get_default_str()};
    }
    const bool array = option->get_expected_max() > 1;
    if (values.empty() || (option->count() == 0 && values.size() == 1 && values[0].empty())) {
      out += "# " + key + (array ? " = []" : " = \"\"") + "\n";
      continue;
    }
    if (!array && values.size() != 1) {
      return Status::InvalidArgument(key + ": " + std::to_string(values.size()) +
                                     " values for a single setting");
    }
    const bool numeric = IsNumericType(option->get_type_name());
    std::string line = key + " = ";
    if (array) line += "[";
    for (size_t i = 0; i < values.size(); ++i) {
      KVGOV_ASSIGN_OR_RETURN(std::string value, FormatValue(key, values[i], numeric));
      if (i > 0) line += ", ";
      line += value;
    }
    if (array) line += "]";
    out += line + "\n";
  }
  return out;
}

std::string ConfigPathFromArgs(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--config" && i + 1 < argc) return argv[i + 1];
    if (arg.rfind("--config=", 0) == 0) return std::string(arg.substr(9));
  }
  return "";
}

Result<ConfigLines> CheckConfigFile(const std::string& path, CLI::App& app) {
  std::ifstream file(path);
  if (!file) return Status::IOError("--config: cannot read '" + path + "'");
  ConfigLines lines;
  CLI::App* section = nullptr;
  std::string section_name;
  // A refusal names the file and line, as a compiler does; it is built only
  // on the way out, not for every line read.
  const auto refuse = [&path](int at, const std::string& what) {
    return Status::InvalidArgument(path + ":" + std::to_string(at) + ": " + what);
  };
  const auto refuse_key = [&refuse](int at, const std::string& key, const std::string& what) {
    return refuse(at, "key '" + key + "'" + what);
  };
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    const std::string_view text = Trim(StripComment(line));
    if (text.empty()) continue;
    if (text.front() == '[') {
      if (text.back() != ']') return refuse(number, "a section header must end in ']'");
      section_name = std::string(Trim(text.substr(1, text.size() - 2)));
      try {
        section = app.get_subcommand(section_name);
      } catch (const CLI::OptionNotFound&) {
        return refuse(number, "[" + section_name + "] is not a kvgov subcommand");
      }
      continue;
    }
    const size_t equals = text.find('=');
    if (equals == std::string_view::npos) {
      return refuse(number, "want 'key = value'");
    }
    const std::string key(Trim(text.substr(0, equals)));
    if (section == nullptr) {
      return refuse_key(number, key,
                        " is outside any [section]; settings of kvgov serve go under [serve]");
    }
    const CLI::Option* option = section->get_option_no_throw("--" + key);
    if (option == nullptr || key == "config") {
      std::vector<std::string> keys;
      for (const CLI::Option* known : section->get_options()) {
        for (const std::string& name : known->get_lnames()) {
          if (name != "config" && name != "help") keys.push_back(name);
        }
      }
      // Keys are the flags' names, dashes and all: gateway_listen is
      // gateway-listen, which edit distance alone may not find.
      std::string dashed = key;
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      std::optional<std::string> near;
      if (std::find(keys.begin(), keys.end(), dashed) != keys.end()) {
        near = dashed;
      } else {
        near = ClosestName(key, keys);
      }
      return refuse_key(number, key,
                        " is not a setting of [" + section_name + "]" +
                            (near ? "; did you mean '" + *near + "'?"
                                  : " (see kvgov " + section_name + " --help)"));
    }
    std::string value(Trim(text.substr(equals + 1)));
    // CLI11, which reads the file after this check, cuts a line at its
    // first '#' even inside quotes, continues an array only when its first
    // element is on the key's line, and keeps comments inside an array as
    // elements: refuse those here rather than let a value change silently.
    if (value.find('#') != std::string::npos) {  // what is left is inside quotes
      return refuse_key(number, key,
                        ": a '#' inside a value; kvgov's config reader takes it for a comment");
    }
    if (value == "[") {
      return refuse_key(
          number, key,
          ": put the array's first element on the key's line, e.g. " + key + " = [\"...\",");
    }
    // An array may run over several lines, up to its closing bracket.
    std::string more;
    int last = number;
    while (!value.empty() && value.front() == '[' && value.back() != ']' &&
           std::getline(file, more)) {
      ++last;
      if (StripComment(more).size() != more.size()) {
        return refuse_key(last, key, ": no comments inside an array");
      }
      value += " ";
      value += Trim(more);
    }
    if (Status checked = CheckValue(value); !checked.ok()) {
      return refuse_key(number, key, ": " + checked.message());
    }
    lines["--" + key] = path + ":" + std::to_string(number);
    number = last;
  }
  return lines;
}

}  // namespace kvgov::cli
