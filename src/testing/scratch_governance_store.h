#pragma once

// Test support for the services: a real RocksDB store and journal in a
// scratch directory, and a single node's recorder over them.

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvgov/journal/journal.h"
#include "kvgov/services/governance_recorder.h"
#include "kvgov/store/store.h"
#include "testing/scratch_dir.h"

namespace kvgov::test_support {

class ScratchGovernanceStore : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<store::Store>> store = store::Store::Open(dir_.string());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    Result<std::unique_ptr<journal::Journal>> journal = journal::Journal::Open(store_.get());
    ASSERT_TRUE(journal.ok()) << journal.status().ToString();
    journal_ = std::move(journal).value();
    recorder_ =
        std::make_unique<services::GovernanceRecorder>(journal_.get(), /*replicated=*/false);
  }

  std::vector<journal::Row> Rows() const {
    Result<std::vector<journal::Row>> rows = journal_->Read(1, 1000);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    return rows.ok() ? *rows : std::vector<journal::Row>{};
  }

  ScratchDir dir_{"kvgov_services_test"};  // outlives the store
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<journal::Journal> journal_;
  std::unique_ptr<services::GovernanceRecorder> recorder_;
};

}  // namespace kvgov::test_support
