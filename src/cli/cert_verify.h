#pragma once

// Internal to kvgov_cli: `kvgov cert verify`. Format and checks:
// docs/formats/certificate.md.

#include <string>
#include <vector>

namespace kvgov::cli {

/// Verifies the deletion certificate in `file` (at most 1 MiB) and prints
/// one line per check to stdout, "ok   <check>: ..." or "FAIL <check>: why":
/// read, parse, schema, fields, certificate_id, signature, issuer, anchor.
///
/// The issuer is trusted when its public key is one of `issuer_keys_hex`
/// (64 hex digits each) or, with `data_dir`, the public half of
/// DATA_DIR/issuer.key when that file exists and is readable (it is never
/// created here). With `data_dir`, the anchor is checked too: the journal
/// in DATA_DIR/store must verify up to and including the anchor row, that
/// row's seq, prev_hash and hash must equal the certificate's, and its
/// subject must be the certificate's directive_id. Opening
/// the store takes RocksDB's lock, so this fails, saying so, while a kvgov
/// daemon runs on that data dir; verify a copy of the directory instead.
/// Without `data_dir` the anchor line reads "skip".
///
/// Returns 0 when every check that ran holds, 1 otherwise.
int RunCertVerify(const std::string& file, const std::vector<std::string>& issuer_keys_hex,
                  const std::string& data_dir);

}  // namespace kvgov::cli
