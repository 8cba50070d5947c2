#include "cli/config_file.h"

#include <cctype>
#include <fstream>

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
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) ||
                             text[i] == '.' || text[i] == '_' || text[i] == 'e' ||
                             text[i] == 'E')) {
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

}  // namespace

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
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    const std::string where = path + ":" + std::to_string(number) + ": ";
    const std::string_view text = Trim(StripComment(line));
    if (text.empty()) continue;
    if (text.front() == '[') {
      if (text.back() != ']') return Status::InvalidArgument(where + "a section header must end in ']'");
      section_name = std::string(Trim(text.substr(1, text.size() - 2)));
      try {
        section = app.get_subcommand(section_name);
      } catch (const CLI::OptionNotFound&) {
        return Status::InvalidArgument(where + "[" + section_name +
                                       "] is not a kvgov subcommand");
      }
      continue;
    }
    const size_t equals = text.find('=');
    if (equals == std::string_view::npos) {
      return Status::InvalidArgument(where + "want 'key = value'");
    }
    const std::string key(Trim(text.substr(0, equals)));
    if (section == nullptr) {
      return Status::InvalidArgument(where + "key '" + key +
                                     "' is outside any [section]; settings of kvgov serve go "
                                     "under [serve]");
    }
    const CLI::Option* option = section->get_option_no_throw("--" + key);
    if (option == nullptr || key == "config") {
      return Status::InvalidArgument(where + "key '" + key + "' is not a setting of [" +
                                     section_name + "] (see kvgov " + section_name + " --help)");
    }
    std::string value(Trim(text.substr(equals + 1)));
    // An array may run over several lines, up to its closing bracket.
    std::string more;
    int last = number;
    while (!value.empty() && value.front() == '[' && value.back() != ']' &&
           std::getline(file, more)) {
      ++last;
      value += " ";
      value += Trim(StripComment(more));
    }
    if (Status checked = CheckValue(value); !checked.ok()) {
      return Status::InvalidArgument(where + "key '" + key + "': " + checked.message());
    }
    lines["--" + key] = path + ":" + std::to_string(number);
    number = last;
  }
  return lines;
}

}  // namespace kvgov::cli
