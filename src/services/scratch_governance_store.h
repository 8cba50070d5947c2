#pragma once

// Test support for the services: a real RocksDB store and journal in a
// scratch directory named after the running test, and a single node's
// recorder over them.

#include <unistd.h>

#include <filesystem>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <vector>

#include "kvgov/journal/journal.h"
#include "kvgov/services/governance_recorder.h"
#include "kvgov/store/store.h"

namespace kvgov::services {

class ScratchGovernanceStore : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvgov_services_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    Result<std::unique_ptr<store::Store>> store = store::Store::Open(dir_.string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    Result<std::unique_ptr<journal::Journal>> journal = journal::Journal::Open(store_.get());
    ASSERT_TRUE(journal.ok()) << journal.status().ToString();
    journal_ = std::move(journal).value();
    recorder_ = std::make_unique<GovernanceRecorder>(journal_.get(), /*replicated=*/false);
  }
  void TearDown() override {
    recorder_.reset();
    journal_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::vector<journal::Row> Rows() const {
    Result<std::vector<journal::Row>> rows = journal_->Read(1, 1000);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    return rows.ok() ? *rows : std::vector<journal::Row>{};
  }

  std::filesystem::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<journal::Journal> journal_;
  std::unique_ptr<GovernanceRecorder> recorder_;
};

}  // namespace kvgov::services
