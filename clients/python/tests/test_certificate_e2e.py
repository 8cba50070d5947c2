"""verify_certificate_with_cli on a certificate a real invalidation produced.

`kvgov demo --quick --exit` drives a simulated vLLM fleet through kvgov,
certifies an invalidation and saves the certificate next to its data dir.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from kvgov_client import verify_certificate_with_cli
from kvgov_harness import KvgovDaemon, kvgov_binary


class CertificateTest(unittest.TestCase):
    binary: str
    data_dir: str
    certificate_id: str
    text: str
    issuer_key: str

    @classmethod
    def setUpClass(cls) -> None:
        cls.binary = kvgov_binary()
        root = Path(tempfile.mkdtemp(prefix="kvgov-py-demo-"))
        cls.addClassCleanup(shutil.rmtree, root, True)
        report_path = root / "report.json"
        demo = subprocess.run(
            [cls.binary, "demo", "--quick", "--exit", "--listen", "127.0.0.1:0",
             "--data-dir", str(root), "--report-json", str(report_path)],
            capture_output=True, text=True, timeout=120, check=False)
        if demo.returncode != 0:
            raise RuntimeError(f"kvgov demo exited {demo.returncode}:\n{demo.stdout}{demo.stderr}")
        report = json.loads(report_path.read_text())
        assert report["invalidation_state"] == "certified", report
        cls.data_dir = report["data_dir"]
        cls.certificate_id = report["certificate_id"]
        cls.text = Path(cls.data_dir + "-certificate.json").read_text()
        # The report JSON does not carry the issuer key: the demo prints it
        # in its `kvgov cert verify ... --issuer-key HEX` line.
        match = re.search(r"--issuer-key ([0-9a-f]{64})", demo.stdout)
        assert match, demo.stdout
        cls.issuer_key = match.group(1)

    def test_the_certificate_verifies_under_the_pinned_key(self) -> None:
        ok, output = verify_certificate_with_cli(self.text, self.issuer_key, self.binary)
        self.assertTrue(ok, output)
        for check in ("schema", "fields", "certificate_id", "signature", "issuer"):
            self.assertRegex(output, rf"(?m)^ok\s+{check}:")
        self.assertRegex(output, r"(?m)^skip\s+anchor:")
        self.assertEqual(json.loads(self.text)["certificate_id"], self.certificate_id)

    def test_the_journal_anchor_verifies_against_the_stopped_data_dir(self) -> None:
        ok, output = verify_certificate_with_cli(self.text, self.issuer_key, self.binary,
                                                 data_dir=self.data_dir)
        self.assertTrue(ok, output)
        self.assertRegex(output, r"(?m)^ok\s+anchor: journal row \d+ \(kind "
                                 r"'invalidation.witnessed'")

    def test_a_restarted_daemon_serves_the_certified_directive(self) -> None:
        # kvgov serve on the demo's data dir, after the demo stopped.
        daemon = KvgovDaemon(data_dir=self.data_dir)
        try:
            client = daemon.start().client()
            issuer = client.issuer()
            self.assertEqual(issuer["public_key"], self.issuer_key)
            certificate = client.certificate(self.certificate_id)
            self.assertEqual(certificate.text, self.text)
            self.assertEqual(certificate.id, self.certificate_id)
            directive = client.wait_for_invalidation(certificate.data["directive_id"],
                                                     timeout=5)
            self.assertEqual((directive["state"], directive["certificate_id"]),
                             ("certified", self.certificate_id))
            self.assertEqual(directive["subject"], certificate.data["subject"])
            ok, output = verify_certificate_with_cli(certificate.text, issuer["public_key"],
                                                     self.binary)
            self.assertTrue(ok, output)
        finally:
            daemon.stop()

    def test_another_key_is_not_trusted(self) -> None:
        other = "ab" * 32
        ok, output = verify_certificate_with_cli(self.text, other, self.binary)
        self.assertFalse(ok)
        self.assertRegex(output, r"(?m)^ok\s+signature:")
        self.assertRegex(output, r"(?m)^FAIL\s+issuer:")

    def test_an_edited_certificate_fails(self) -> None:
        edited = json.loads(self.text)
        edited["target_count"] += 1
        ok, output = verify_certificate_with_cli(json.dumps(edited), self.issuer_key,
                                                 self.binary)
        self.assertFalse(ok)
        self.assertRegex(output, r"(?m)^FAIL\s+certificate_id:")

    def test_a_missing_binary_is_a_failure_not_an_exception(self) -> None:
        ok, output = verify_certificate_with_cli(self.text, self.issuer_key,
                                                 "/nonexistent/kvgov")
        self.assertFalse(ok)
        self.assertIn("/nonexistent/kvgov", output)


if __name__ == "__main__":
    unittest.main()
