// Test support for StreamStoreTest.KillNineAtRandomMomentsRecoversAnExactPrefix:
// a process that ingests the test history into a stream store until it is
// killed. It opens the store in argv[1], recovers worker "w1" from it, writes
// one byte to the file descriptor argv[2] once it is ingesting, and applies
// the history from the batch after the recovered one, forever, syncing the
// store's WAL every 5 ms. Exit status 2-4: it could not start.

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "ingest/stream_store_test_history.h"
#include "kvgov/ingest/stream_store.h"

int main(int argc, char** argv) {
  using namespace kvgov;
  using ingest::stream_store_test::Batch;
  using ingest::stream_store_test::kBlockSize;
  if (argc != 3) return 2;
  Result<std::unique_ptr<store::Store>> store = store::Store::Open(argv[1]);
  if (!store.ok()) return 3;
  index::ResidencyIndex index;
  if (!index.AddWorker("w1", "llama", kBlockSize).ok()) return 3;
  ingest::StreamStore durable(store->get(), &index, {.snapshot_every = 13});
  ingest::EngineStream stream("w1", ingest::EngineKind::kVllm, &index, nullptr, {}, &durable);
  ingest::StreamStore::RecoveryStats stats;
  if (!durable.Recover(stream, &stats).ok()) return 4;
  std::thread syncer([&store] {
    while (true) {
      (void)(*store)->SyncWal();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  syncer.detach();
  const char ingesting = 1;
  if (::write(std::atoi(argv[2]), &ingesting, 1) != 1) return 2;
  for (uint64_t seq = static_cast<uint64_t>(stream.stats().last_seq.load() + 1);; ++seq) {
    stream.OnMessage(seq, Batch(seq));
  }
}
