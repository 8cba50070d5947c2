#include "kvgov/console/assets.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace kvgov::console {
namespace {

std::string ReadSource(const std::string& name) {
  std::ifstream in(std::string(KVGOV_CONSOLE_STATIC_DIR) + "/" + name, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

TEST(ConsoleAssetsTest, EveryFileIsEmbeddedByteForByte) {
  for (const char* name : {"index.html", "app.js", "style.css"}) {
    std::optional<Asset> asset = FindAsset(name);
    ASSERT_TRUE(asset.has_value()) << name;
    EXPECT_EQ(asset->body, ReadSource(name)) << name;
  }
  EXPECT_EQ(FindAsset("")->body, FindAsset("index.html")->body);
  EXPECT_EQ(FindAsset("app.js")->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(FindAsset("style.css")->content_type, "text/css; charset=utf-8");
  EXPECT_EQ(FindAsset("index.html")->content_type, "text/html; charset=utf-8");
}

TEST(ConsoleAssetsTest, NothingElseIsServed) {
  for (const char* path : {"../CMakeLists.txt", "assets.cc", "index.htm", "/index.html", "x"}) {
    EXPECT_FALSE(FindAsset(path).has_value()) << path;
  }
}

// The page loads nothing from elsewhere: no absolute URL in any file but
// the SVG namespace, which names and fetches nothing.
TEST(ConsoleAssetsTest, ThePageFetchesNothingFromTheNetwork) {
  for (const char* name : {"index.html", "app.js", "style.css"}) {
    std::string body(FindAsset(name)->body);
    for (size_t at; (at = body.find("http://www.w3.org/2000/svg")) != std::string::npos;) {
      body.erase(at, 26);
    }
    EXPECT_EQ(body.find("http://"), std::string::npos) << name;
    EXPECT_EQ(body.find("https://"), std::string::npos) << name;
    EXPECT_EQ(body.find("//cdn"), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace kvgov::console
