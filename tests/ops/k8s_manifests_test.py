#!/usr/bin/env python3
"""deploy/k8s renders, with secrets from deploy/k8s/make-secrets.sh, into
manifests a cluster would run as promised and that the real kvgov accepts.

Usage: k8s_manifests_test.py KVGOV_BINARY SOURCE_DIR

On a copy of deploy/k8s (never the source tree's secrets):
  - make-secrets.sh makes every file mode 0600, tokens whose secrets match
    tokens.json's hashes and roles, a 64-hex Redis password; run again, it
    keeps every file byte for byte and says so;
  - base (the replicas) and every overlay render with `kubectl kustomize`;
    in each render:
    - every container and initContainer runs non-root, without privilege
      escalation or capabilities; kvgov's on a read-only root file system
      as uid/gid 65532 with fsGroup 65532, Redis's as 999; no shell;
    - every probe's port names a containerPort of its container;
    - every Service selects a pod template and targets its containerPorts;
      the PodDisruptionBudget selects the StatefulSet kvgov's pods;
    - kvgov runs as the StatefulSet kvgov (no Deployment): its serviceName
      is a headless Service of the render, its updateStrategy RollingUpdate
      (one pod at a time, each ready before the next), and kvgov's data dir
      (and the token import's) lies on its volumeClaimTemplate `data`
      (ReadWriteOnce, a size), which outlives the pod;
    - every ConfigMap, Secret and PersistentVolumeClaim a pod refers to is
      in the render (ConfigMaps and Secrets under a content-hash suffix, so
      a change rolls the pods), with the keys referred to; every volume a
      container mounts is the pod's or a volumeClaimTemplate; every
      PersistentVolumeClaim of the render is used;
    - every file argument of kvgov lies on a volume that provides it;
      every `--flag` of kvgov's containers is one `kvgov serve --help` (or
      `kvgov token import --help`) lists, every $(VAR) one the container
      defines, and the whole command line, its files in place, passes
      `kvgov serve --print-config`; no redis:// URL carries a password and
      no kvgov container takes the Redis Secret as an env variable (the
      password is a file, --redis-password-file, out of argv and
      --print-config); the ConfigMap's kvgov.toml loads, and its listen and
      gateway-listen ports are the named containerPorts;
    - the NetworkPolicies select kvgov's pods, open the control port only to
      engines, operators and the monitoring namespace and the gateway port
      only to clients, let kvgov reach DNS and the engines (and Redis), and
      Redis only be reached by kvgov;
    - replicas: two or more pods, --redis to the in-cluster Redis and
      --redis-password-file on the Secret's password (read-only, in both
      the initContainer and kvgov), --replica-id from the pod's name, Redis
      with AOF, requirepass and a volume; single: one pod, a volume for the
      store, no Redis object and no --redis anywhere;
    - the pod's own command lines run, its files in place: the
      initContainer's token import twice (the second changes nothing), then
      kvgov serve beyond loopback (0.0.0.0, a port the kernel picks) as two
      replicas on a real redis-server started with the render's password
      (left out without redis-server), or as the single node; each answers
      every probe's HTTP path with 200 without a token, and /metrics only
      to the imported prometheus token; the first, stopped and started
      again on its data dir under its name (a StatefulSet's restart), is
      ready again.

kubectl (with kustomize) and python3-yaml are needed: without either the
test exits 77 (skipped).
"""

import base64
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvgov_ops import (SKIP, RedisServer, TestFailure, fail, http, read_port_file,  # noqa: E402
                       run_main, stop_process, wait_for)

try:
    import yaml
except ImportError:  # reported by main()
    yaml = None

KVGOV_UID = 65532
REDIS_UID = 999
TOKENS = {  # make-secrets.sh's tokens: name -> roles
    "engines": ["ingest"],
    "app": ["infer"],
    "router": ["route"],
    "ops": ["admin", "read"],
    "prometheus": ["read"],
}
SECRET_FILES = ["issuer.key", "tenant-salt.key", "redis-password", "tokens.json",
                "token-secrets.txt"]
ENGINE_LABEL = {"kvgov.io/engine": "true"}
OPERATOR_LABEL = {"kvgov.io/operator": "true"}
CLIENT_LABEL = {"kvgov.io/client": "true"}
MONITORING_NS_LABEL = {"kvgov.io/monitoring": "true"}
ENGINE_PORTS = {5557, 5558, 8000}
GENERATED = re.compile(r"^(.+)-[a-z0-9]{10}$")  # kustomize's content-hash suffix
SHELLS = {"sh", "bash", "dash", "ash", "zsh"}


def run(args, what, cwd=None, timeout_s=60):
    result = subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=timeout_s,
                            check=False)
    if result.returncode != 0:
        fail(f"{what}: `{' '.join(args)}` exited {result.returncode}:\n"
             f"{result.stdout}{result.stderr}")
    return result.stdout


# ---- make-secrets.sh ----------------------------------------------------------

def check_make_secrets(binary, k8s):
    script = os.path.join(k8s, "make-secrets.sh")
    secrets = os.path.join(k8s, "base", "secrets")
    first = run(["bash", script, "--kvgov", binary], "make-secrets.sh, first run")
    made = {}
    for name in SECRET_FILES:
        path = os.path.join(secrets, name)
        if not os.path.isfile(path):
            fail(f"make-secrets.sh did not make {name}; it said:\n{first}")
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode != 0o600:
            fail(f"make-secrets.sh made {name} mode {mode:04o}, not 0600")
        with open(path, "rb") as f:
            made[name] = f.read()
    dir_mode = stat.S_IMODE(os.stat(secrets).st_mode)
    if dir_mode != 0o700:
        fail(f"make-secrets.sh left {secrets} mode {dir_mode:04o}, not 0700")

    password = made["redis-password"].decode()
    if not re.fullmatch(r"[0-9a-f]{64}", password):
        fail(f"redis-password is not 64 hex digits without a newline: {password!r}")
    for key in ("issuer.key", "tenant-salt.key"):
        if len(made[key]) != 32:
            fail(f"{key} holds {len(made[key])} bytes, not kvgov keygen's 32")

    records = {t["name"]: t for t in json.loads(made["tokens.json"])["tokens"]}
    if set(records) != set(TOKENS):
        fail(f"tokens.json holds tokens {sorted(records)}, not {sorted(TOKENS)}")
    secrets_by_name = {}
    for line in made["token-secrets.txt"].decode().splitlines():
        name, _, secret = line.partition(" ")
        secrets_by_name[name] = secret
    if set(secrets_by_name) != set(TOKENS):
        fail(f"token-secrets.txt names {sorted(secrets_by_name)}, not {sorted(TOKENS)}")
    for name, roles in TOKENS.items():
        record, secret = records[name], secrets_by_name[name]
        if sorted(record["roles"]) != sorted(roles) or record["tenant"] != "":
            fail(f"token {name}: roles {record['roles']} tenant {record['tenant']!r}, "
                 f"want {roles}, fleet-wide")
        if hashlib.sha256(secret.encode()).hexdigest() != record["sha256"]:
            fail(f"token {name}: the secret in token-secrets.txt is not the one whose "
                 f"hash is in tokens.json")

    second = run(["bash", script, "--kvgov", binary], "make-secrets.sh, second run")
    for name in SECRET_FILES:
        with open(os.path.join(secrets, name), "rb") as f:
            if f.read() != made[name]:
                fail(f"make-secrets.sh run twice changed {name}")
    for name in ["issuer.key", "tenant-salt.key", "redis-password", "tokens.json"]:
        if not re.search(rf"{re.escape(name)}.*kept", second):
            fail(f"make-secrets.sh's second run does not say {name} was kept:\n{second}")

    # An explicit DIR, and a token-secrets.txt left without its tokens.json.
    other = os.path.join(os.path.dirname(k8s), "other-secrets")
    run(["bash", script, "--kvgov", binary, other], "make-secrets.sh DIR")
    if sorted(os.listdir(other)) != sorted(SECRET_FILES):
        fail(f"make-secrets.sh DIR made {sorted(os.listdir(other))}, not {SECRET_FILES}")
    os.remove(os.path.join(other, "tokens.json"))
    stale = subprocess.run(["bash", script, "--kvgov", binary, other], capture_output=True,
                           text=True, timeout=60, check=False)
    if stale.returncode == 0 or os.path.exists(os.path.join(other, "tokens.json")):
        fail("make-secrets.sh made new tokens beside an old token-secrets.txt "
             "(whose secrets would not match them)")
    print(f"make-secrets.sh: {len(SECRET_FILES)} files mode 0600, tokens match their "
          f"secrets; a second run kept them all")
    return secrets_by_name


# ---- the kvgov binary's flags -----------------------------------------------

def help_flags(binary, *subcommand):
    text = run([binary, *subcommand, "--help"], f"kvgov {' '.join(subcommand)} --help")
    return set(re.findall(r"^  (?:-\w,)?(--[A-Za-z0-9][\w-]*)", text, re.M)), text


def known_flags(binary):
    """{'serve': flags, 'token import': flags}."""
    global_flags, _ = help_flags(binary)
    serve, _ = help_flags(binary, "serve")
    token, token_help = help_flags(binary, "token")
    subcommands = token_help.split("Subcommands:", 1)[-1]
    if not re.search(r"^  import\b", subcommands, re.M):
        fail("this kvgov has no `kvgov token import`, which the initContainer runs")
    imported, _ = help_flags(binary, "token", "import")
    return {"serve": serve | global_flags, "token import": imported | token | global_flags}


# ---- renders ------------------------------------------------------------------

def render(kubectl, directory):
    text = run([kubectl, "kustomize", directory], f"kubectl kustomize {directory}")
    return [d for d in yaml.safe_load_all(text) if d]


def object_name(obj):
    return f"{obj['kind']}/{obj['metadata']['name']}"


def pod_templates(objects):
    """[(owner object, pod template)] of every workload."""
    return [(o, o["spec"]["template"]) for o in objects
            if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet")]


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def is_kvgov_image(image):
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0] == "kvgov"


def is_redis_image(image):
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0] == "redis"


def containers(spec):
    return [("initContainer", c) for c in spec.get("initContainers", [])] + \
           [("container", c) for c in spec.get("containers", [])]


def find(objects, kind, name=None, generated=False):
    for obj in objects:
        if obj["kind"] != kind:
            continue
        actual = obj["metadata"]["name"]
        if name is None or actual == name:
            return obj
        if generated and GENERATED.match(actual) and GENERATED.match(actual).group(1) == name:
            return obj
    return None


def kvgov_workload(where, objects):
    """The StatefulSet kvgov. A Deployment would put each replica on a
    volume no successor finds, under a pod name no successor has."""
    for kind in ("Deployment", "DaemonSet", "ReplicaSet"):
        if find(objects, kind, "kvgov") is not None:
            fail(f"{where} {kind}/kvgov: kvgov must run as a StatefulSet (each replica's "
                 f"data dir on a volume of its own, its pod name stable)")
    statefulset = find(objects, "StatefulSet", "kvgov")
    if statefulset is None:
        fail(f"{where}: no StatefulSet kvgov")
    return statefulset


def claim_templates(owner):
    """{name: volumeClaimTemplate} of a StatefulSet (empty for others)."""
    return {t["metadata"]["name"]: t for t in owner["spec"].get("volumeClaimTemplates", [])}


def pod_volumes(owner, spec):
    """{name: volume} a pod of `owner` has: its spec's volumes, and a
    StatefulSet's volumeClaimTemplates as {"name", "volumeClaimTemplate"}."""
    volumes = {name: {"name": name, "volumeClaimTemplate": template}
               for name, template in claim_templates(owner).items()}
    volumes.update({v["name"]: v for v in spec.get("volumes", [])})
    return volumes


def check_security(where, owner, spec):
    pod_sc = spec.get("securityContext", {})
    kvgov_pod = any(is_kvgov_image(c["image"]) for _, c in containers(spec))
    if kvgov_pod:
        for key, want in (("runAsUser", KVGOV_UID), ("runAsGroup", KVGOV_UID),
                          ("fsGroup", KVGOV_UID)):
            if pod_sc.get(key) != want:
                fail(f"{where}: pod securityContext.{key} is {pod_sc.get(key)}, want {want} "
                     f"(the image's user kvgov; Secret files are group-readable)")
        if spec.get("automountServiceAccountToken") is not False:
            fail(f"{where}: kvgov's pods must not mount an API token "
                 f"(automountServiceAccountToken: false)")
    for kind, c in containers(spec):
        who = f"{where} {kind} {c['name']}"
        sc = c.get("securityContext", {})
        effective = {**pod_sc, **sc}
        if effective.get("runAsNonRoot") is not True:
            fail(f"{who}: runAsNonRoot is not true")
        uid = effective.get("runAsUser")
        if uid is None or uid == 0:
            fail(f"{who}: runAsUser {uid}: must be set, and not 0")
        if is_redis_image(c["image"]) and uid != REDIS_UID:
            fail(f"{who}: the redis image's user is {REDIS_UID}, runAsUser is {uid}")
        seccomp = effective.get("seccompProfile", {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            fail(f"{who}: seccompProfile {seccomp}, want RuntimeDefault")
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(f"{who}: allowPrivilegeEscalation is not false")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []) or \
                sc.get("capabilities", {}).get("add"):
            fail(f"{who}: capabilities must drop ALL and add none: {sc.get('capabilities')}")
        if sc.get("privileged"):
            fail(f"{who}: privileged")
        if is_kvgov_image(c["image"]) and sc.get("readOnlyRootFilesystem") is not True:
            fail(f"{who}: kvgov's root file system must be read-only")
        command = c.get("command", []) + c.get("args", [])
        if command and os.path.basename(command[0]) in SHELLS:
            fail(f"{who}: runs a shell ({command[:2]}); kvgov's image has none")
        if is_kvgov_image(c["image"]) and c.get("command") not in (None, ["/usr/bin/kvgov"]):
            fail(f"{who}: command {c['command']} replaces the image's /usr/bin/kvgov")
        resources = c.get("resources", {})
        if not resources.get("requests") or "memory" not in resources.get("limits", {}):
            fail(f"{who}: needs resource requests and a memory limit: {resources}")


def check_probes(where, spec, probe_paths):
    for kind, c in containers(spec):
        who = f"{where} {kind} {c['name']}"
        port_names = {p.get("name") for p in c.get("ports", [])}
        port_numbers = {p["containerPort"] for p in c.get("ports", [])}
        probes = {k: c[k] for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in c}
        if kind == "container" and is_kvgov_image(c["image"]):
            if set(probes) != {"startupProbe", "livenessProbe", "readinessProbe"}:
                fail(f"{who}: has probes {sorted(probes)}, want startup, liveness and "
                     f"readiness")
            startup = probes["startupProbe"]
            allowed = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
            if allowed < 120:
                fail(f"{who}: the startup probe gives recovery {allowed} s, want 120 s or more")
            if probes["readinessProbe"].get("httpGet", {}).get("path") != "/readyz":
                fail(f"{who}: the readiness probe must ask /readyz (recovered and caught up)")
            if probes["livenessProbe"].get("httpGet", {}).get("path") != "/healthz":
                fail(f"{who}: the liveness probe must ask /healthz")
        for probe_kind, probe in probes.items():
            action = probe.get("httpGet") or probe.get("tcpSocket")
            if action is None:
                if "exec" in probe:
                    fail(f"{who} {probe_kind}: an exec probe (no shell in kvgov's image; "
                         f"a password on Redis's)")
                fail(f"{who} {probe_kind}: neither httpGet nor tcpSocket")
            port = action.get("port")
            if port not in port_names and port not in port_numbers:
                fail(f"{who} {probe_kind}: port {port!r} is none of the container's ports "
                     f"{sorted(port_names)}")
            if "httpGet" in probe:
                if not is_kvgov_image(c["image"]):
                    fail(f"{who} {probe_kind}: an HTTP probe on a container that is not kvgov")
                probe_paths.setdefault(probe["httpGet"]["path"], set()).add(
                    f"{who} {probe_kind}")


def check_services(where, objects):
    templates = pod_templates(objects)
    for svc in (o for o in objects if o["kind"] == "Service"):
        who = f"{where} {object_name(svc)}"
        selector = svc["spec"].get("selector", {})
        selected = [(o, t) for o, t in templates if matches(selector, t["metadata"]["labels"])]
        if not selected:
            fail(f"{who}: selector {selector} matches no pod template")
        for owner, template in selected:
            ports = [p for c in template["spec"]["containers"] for p in c.get("ports", [])]
            for port in svc["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                if not any(target in (p.get("name"), p["containerPort"]) for p in ports):
                    fail(f"{who}: targetPort {target!r} is no containerPort of "
                         f"{object_name(owner)}")
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    statefulset = kvgov_workload(where, objects)
    if not any(matches(p["spec"]["selector"]["matchLabels"],
                       statefulset["spec"]["template"]["metadata"]["labels"]) for p in pdbs):
        fail(f"{where}: no PodDisruptionBudget selects the StatefulSet kvgov's pods")
    for pdb in pdbs:
        if pdb["spec"].get("maxUnavailable") != 1:
            fail(f"{where} {object_name(pdb)}: maxUnavailable {pdb['spec'].get('maxUnavailable')},"
                 f" want 1")


def referenced(spec):
    """[(kind, name, key or None, where)] of the ConfigMaps, Secrets and
    PersistentVolumeClaims a pod spec refers to."""
    refs = []
    for volume in spec.get("volumes", []):
        where = f"volume {volume['name']}"
        if "configMap" in volume:
            for item in volume["configMap"].get("items", [{}]):
                refs.append(("ConfigMap", volume["configMap"]["name"], item.get("key"), where))
        if "secret" in volume:
            for item in volume["secret"].get("items", [{}]):
                refs.append(("Secret", volume["secret"]["secretName"], item.get("key"), where))
        if "persistentVolumeClaim" in volume:
            refs.append(("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"],
                         None, where))
        for source in volume.get("projected", {}).get("sources", []):
            for kind, field in (("ConfigMap", "configMap"), ("Secret", "secret")):
                if field in source:
                    for item in source[field].get("items", [{}]):
                        refs.append((kind, source[field]["name"], item.get("key"), where))
    for _, c in containers(spec):
        for env in c.get("env", []):
            value_from = env.get("valueFrom", {})
            for kind, field in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                if field in value_from:
                    refs.append((kind, value_from[field]["name"], value_from[field]["key"],
                                 f"{c['name']} env {env['name']}"))
        for env_from in c.get("envFrom", []):
            for kind, field in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
                if field in env_from:
                    refs.append((kind, env_from[field]["name"], None, f"{c['name']} envFrom"))
    for pull in spec.get("imagePullSecrets", []):
        refs.append(("Secret", pull["name"], None, "imagePullSecrets"))
    return refs


def check_references(where, objects):
    for kind in ("ConfigMap", "Secret"):
        for obj in (o for o in objects if o["kind"] == kind):
            if not GENERATED.match(obj["metadata"]["name"]):
                fail(f"{where} {object_name(obj)}: no content-hash suffix (generated with "
                     f"disableNameSuffixHash?): a change would not roll the pods")
    used_claims = set()
    for owner, template in pod_templates(objects):
        spec = template["spec"]
        for kind, name, key, how in referenced(spec):
            who = f"{where} {object_name(owner)} {how}"
            obj = find(objects, kind, name)
            if obj is None:
                fail(f"{who}: refers to {kind} {name}, which the render does not define "
                     f"(a generator's name kustomize did not rewrite?)")
            if key is not None and key not in obj.get("data", {}):
                fail(f"{who}: {kind} {name} has no key {key}")
            if kind == "PersistentVolumeClaim":
                used_claims.add(name)
        # A StatefulSet's claim templates: each pod gets its own claim,
        # TEMPLATE-POD, made by the controller rather than in the render.
        templates = claim_templates(owner)
        for name, template in templates.items():
            who = f"{where} {object_name(owner)} volumeClaimTemplate {name}"
            if any(v["name"] == name for v in spec.get("volumes", [])):
                fail(f"{who}: the pod also has a volume named {name}; one of them is not used")
            claim = template.get("spec", {})
            if not claim.get("accessModes"):
                fail(f"{who}: no accessModes")
            if "storage" not in claim.get("resources", {}).get("requests", {}):
                fail(f"{who}: no storage request")
        volumes = pod_volumes(owner, spec)
        for kind, c in containers(spec):
            for mount in c.get("volumeMounts", []):
                if mount["name"] not in volumes:
                    fail(f"{where} {object_name(owner)} {kind} {c['name']}: mounts "
                         f"{mount['name']} at {mount['mountPath']}, which is neither a volume "
                         f"of the pod nor a volumeClaimTemplate")
        sa = spec.get("serviceAccountName")
        if sa and find(objects, "ServiceAccount", sa) is None:
            fail(f"{where} {object_name(owner)}: ServiceAccount {sa} is not in the render")
        if sa and find(objects, "ServiceAccount", sa).get("automountServiceAccountToken") \
                is not False:
            fail(f"{where} ServiceAccount/{sa}: automountServiceAccountToken is not false")
    for pvc in (o for o in objects if o["kind"] == "PersistentVolumeClaim"):
        if pvc["metadata"]["name"] not in used_claims:
            fail(f"{where} {object_name(pvc)}: no pod uses it (left over from before the "
                 f"StatefulSet's volumeClaimTemplates?)")


def volume_data(objects, volume):
    """{file name: bytes} a configMap or secret volume shows, or None for
    directories (emptyDir, PVC, volumeClaimTemplate)."""
    if "configMap" in volume:
        obj = find(objects, "ConfigMap", volume["configMap"]["name"])
        return {k: v.encode() for k, v in obj.get("data", {}).items()}
    if "secret" in volume:
        obj = find(objects, "Secret", volume["secret"]["secretName"])
        return {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}
    return None


def write_file(path, data, mode):
    if os.path.lexists(path):  # another container of the pod mounts it too
        os.remove(path)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def materialize(root, objects, owner, spec, container):
    """Lays out the container's volume mounts under root, files with their
    Secret's or ConfigMap's bytes; returns [(mountPath, volume, readOnly)]."""
    volumes = pod_volumes(owner, spec)
    mounts = []
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        if volume is None:
            fail(f"{container['name']}: mounts volume {mount['name']}, which the pod lacks")
        target = root + mount["mountPath"]
        data = volume_data(objects, volume)
        mode = (volume.get("secret") or volume.get("configMap") or {}).get("defaultMode", 0o644)
        if os.geteuid() != 0:
            # The pod sees root's files, group fsGroup, which kvgov may read
            # through its group; a test that is not root can make only its
            # own, which kvgov reads by the owner's bits alone.
            mode = (mode & 0o700) | 0o400
        if data is None:
            os.makedirs(target, mode=0o700, exist_ok=True)
        elif "subPath" in mount:
            if mount["subPath"] not in data:
                fail(f"{container['name']}: mount {mount['mountPath']} takes subPath "
                     f"{mount['subPath']}, which volume {mount['name']} lacks")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            write_file(target, data[mount["subPath"]], mode)
        else:
            os.makedirs(target, exist_ok=True)
            for key, value in data.items():
                write_file(os.path.join(target, key), value, mode)
        mounts.append((mount["mountPath"], volume, mount.get("readOnly", False)))
    return mounts


def expand(value, env_values, who):
    def one(match):
        name = match.group(1)
        if name not in env_values:
            fail(f"{who}: $({name}) in its arguments is none of its env variables")
        return env_values[name]
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, value)


def env_values(objects, container, pod_name):
    values = {}
    for env in container.get("env", []):
        if "value" in env:
            values[env["name"]] = env["value"]
            continue
        value_from = env.get("valueFrom", {})
        if "secretKeyRef" in value_from:
            ref = value_from["secretKeyRef"]
            values[env["name"]] = base64.b64decode(
                find(objects, "Secret", ref["name"])["data"][ref["key"]]).decode()
        elif "configMapKeyRef" in value_from:
            ref = value_from["configMapKeyRef"]
            values[env["name"]] = find(objects, "ConfigMap", ref["name"])["data"][ref["key"]]
        elif value_from.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            values[env["name"]] = pod_name
        else:
            values[env["name"]] = "x"
    return values


def option(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


REDIS_URL_PASSWORD = re.compile(r"rediss?://[^/@]*:[^/@]*@")  # redis://[USER]:PASSWORD@


def secret_texts(objects, volumes):
    """[(Secret name, key, text)] of the Secret volumes among `volumes`
    whose values are text (passwords; not the binary keys)."""
    texts = []
    for volume in volumes:
        if "secret" not in volume:
            continue
        for key, value in volume_data(objects, volume).items():
            try:
                text = value.decode().strip()
            except UnicodeDecodeError:
                continue
            if len(text) >= 8:
                texts.append((volume["secret"]["secretName"], key, text))
    return texts


def check_kvgov_commands(where, objects, binary, flags, tmp):
    """Flags, $(VAR)s, file arguments, secrets kept out of arguments and
    --print-config of kvgov's containers; returns {'serve': args, 'init':
    args} (expanded), {'serve here': ..., 'init here': ...}, the same with
    their files laid out under the temporary directory, and {'serve mounts':
    ..., 'init mounts': ...}, their [(mountPath, volume, readOnly)]."""
    statefulset = kvgov_workload(where, objects)
    spec = statefulset["spec"]["template"]["spec"]
    pod_name = "kvgov-0"
    found = {}
    for kind, c in containers(spec):
        if not is_kvgov_image(c["image"]):
            continue
        who = f"{where} StatefulSet/kvgov {kind} {c['name']}"
        raw = c.get("args", [])
        if raw[:1] == ["serve"]:
            role, known = "serve", flags["serve"]
        elif raw[:2] == ["token", "import"]:
            role, known = "init", flags["token import"]
            if kind != "initContainer":
                fail(f"{who}: token import must run as an initContainer, before kvgov")
        else:
            fail(f"{who}: args {raw[:2]} are neither `serve` nor `token import`")
        for arg in raw:
            if arg.startswith("--") and arg.split("=", 1)[0] not in known:
                fail(f"{who}: `kvgov {'serve' if role == 'serve' else 'token import'}` "
                     f"knows no flag {arg}")
        # The Redis password is a file: not in a URL (argv, /proc/PID/cmdline,
        # --print-config), and not in the environment either.
        for env in c.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref is not None and GENERATED.sub(r"\1", ref["name"]) == "kvgov-redis":
                fail(f"{who}: env {env['name']} takes the Redis password from Secret "
                     f"{ref['name']}; mount it and give --redis-password-file instead")
        # One tree for the pod: its containers share its volumes.
        root = os.path.join(tmp, f"{where.replace('/', '_')}-pod")
        mounts = materialize(root, objects, statefulset, spec, c)
        values = env_values(objects, c, pod_name)
        args = [expand(a, values, who) for a in raw]
        for arg in raw + args:
            if REDIS_URL_PASSWORD.search(arg):
                fail(f"{who}: {REDIS_URL_PASSWORD.sub('redis://:***@', arg)} carries a "
                     f"password, which shows in the process's arguments and in "
                     f"--print-config; give it with --redis-password-file")
        secrets = secret_texts(objects, [m[1] for m in mounts])
        for name, key, text in secrets:
            if any(text in arg for arg in args):
                fail(f"{who}: its arguments hold the value of Secret {name} key {key}")
        # Every absolute path among the arguments lies on a mount, which
        # holds the file (Secret, ConfigMap) or is writable (a data dir).
        local = []
        for i, arg in enumerate(args):
            if not arg.startswith("/"):
                local.append(arg)
                continue
            under = [m for m in mounts
                     if arg == m[0] or arg.startswith(m[0].rstrip("/") + "/")]
            owner = max(under, key=lambda m: len(m[0]), default=None)
            if owner is None:
                fail(f"{who}: {args[i - 1]} {arg} is on no volume (the root file system is "
                     f"read-only, and the image holds no such file)")
            mount_path, volume, read_only = owner
            if volume_data(objects, volume) is not None:
                if not os.path.isfile(root + arg):
                    fail(f"{who}: {args[i - 1]} {arg}: volume {volume['name']} has no such file")
            elif read_only:
                fail(f"{who}: {args[i - 1]} {arg} is on read-only volume {volume['name']}")
            local.append(root + arg)
        for mount_path, volume, read_only in mounts:
            if "secret" in volume:
                key_mode = volume["secret"].get("defaultMode")
                if key_mode is not None and key_mode & 0o007:
                    fail(f"{who}: Secret volume {volume['name']} is world-readable "
                         f"(defaultMode {key_mode:04o}); want 0440 with fsGroup")
                if not read_only:
                    fail(f"{who}: Secret volume {volume['name']} is mounted at {mount_path} "
                         f"without readOnly: true")
        if role == "serve":
            printed = run([binary, *local, "--print-config"],
                          f"{who}: its command line, files in place", timeout_s=30)
            check_listen_ports(who, c, printed)
            for name, key, text in secrets:
                if text in printed:
                    fail(f"{who}: kvgov serve --print-config shows the value of Secret "
                         f"{name} key {key}")
        found[role] = args
        found[role + " here"] = local
        found[role + " mounts"] = mounts
    if "serve" not in found:
        fail(f"{where}: StatefulSet/kvgov runs no `kvgov serve`")
    if "init" not in found:
        fail(f"{where}: StatefulSet/kvgov imports no tokens before kvgov starts (an "
             f"initContainer running `kvgov token import`)")
    return found


def check_listen_ports(who, container, printed):
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    for key, name in (("listen", "control"), ("gateway-listen", "gateway")):
        match = re.search(rf'^{key} = "([^"]*):(\d+)"$', printed, re.M)
        if match is None:
            fail(f"{who}: its config sets no {key}:\n{printed}")
        if match.group(1) in ("127.0.0.1", "localhost", "::1", "[::1]"):
            fail(f"{who}: {key} {match.group(1)} is loopback: no Service could reach it")
        if ports.get(name) != int(match.group(2)):
            fail(f"{who}: {key} port {match.group(2)} is not containerPort {name} "
                 f"({ports.get(name)})")


def check_config(where, objects, binary, tmp):
    config = find(objects, "ConfigMap", "kvgov-config", generated=True)
    if config is None or "kvgov.toml" not in config.get("data", {}):
        fail(f"{where}: no ConfigMap kvgov-config with a kvgov.toml")
    path = os.path.join(tmp, f"{where.replace('/', '_')}-kvgov.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(config["data"]["kvgov.toml"])
    run([binary, "serve", "--config", path, "--print-config"],
        f"{where} {object_name(config)}: kvgov.toml")


# ---- NetworkPolicies ----------------------------------------------------------

def port_matches(policy_port, name, number, protocol="TCP"):
    if policy_port.get("protocol", "TCP") != protocol:
        return False
    port = policy_port.get("port")
    if port is None:
        return True
    if isinstance(port, str):
        return port == name
    return port <= number <= policy_port.get("endPort", port)


def peer_text(peer):
    return ", ".join(f"{k}={v.get('matchLabels', v)}" if isinstance(v, dict) else f"{k}={v}"
                     for k, v in peer.items())


def check_network_policies(where, objects, replicas):
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    templates = pod_templates(objects)
    for policy in policies:
        selector = policy["spec"]["podSelector"].get("matchLabels", {})
        if not any(matches(selector, t["metadata"]["labels"]) for _, t in templates):
            fail(f"{where} {object_name(policy)}: podSelector {selector} selects no pod of "
                 f"the render")
    statefulset = kvgov_workload(where, objects)
    kvgov_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    kvgov_ports = {p["name"]: p["containerPort"]
                   for c in statefulset["spec"]["template"]["spec"]["containers"]
                   for p in c.get("ports", [])}
    selecting = [p for p in policies
                 if matches(p["spec"]["podSelector"].get("matchLabels", {}), kvgov_labels)]

    # Ingress: who reaches each of kvgov's ports.
    ingress = [p for p in selecting if "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    if not ingress:
        fail(f"{where}: no NetworkPolicy limits ingress to kvgov's pods")
    admitted = {"control": [], "gateway": []}
    for policy in ingress:
        for rule in policy["spec"].get("ingress", []):
            for port_name in admitted:
                if rule.get("ports") and not any(
                        port_matches(p, port_name, kvgov_ports[port_name]) for p in rule["ports"]):
                    continue
                if not rule.get("from"):
                    fail(f"{where} {object_name(policy)}: a rule admits every source to port "
                         f"{port_name}")
                admitted[port_name].extend((object_name(policy), peer) for peer in rule["from"])
    allowed = {
        "control": [{"podSelector": {"matchLabels": ENGINE_LABEL}},
                    {"podSelector": {"matchLabels": OPERATOR_LABEL}},
                    {"namespaceSelector": {"matchLabels": MONITORING_NS_LABEL}}],
        "gateway": [{"podSelector": {"matchLabels": CLIENT_LABEL}}],
    }
    for port_name, peers in admitted.items():
        for policy_name, peer in peers:
            if peer not in allowed[port_name]:
                fail(f"{where} {policy_name}: port {port_name} admits {peer_text(peer)}; only "
                     f"{'; '.join(peer_text(p) for p in allowed[port_name])} may reach it")
        for want in allowed[port_name]:
            if want not in [peer for _, peer in peers]:
                fail(f"{where}: no NetworkPolicy admits {peer_text(want)} to kvgov's port "
                     f"{port_name}")

    # Egress: DNS, the engines, Redis.
    egress = [p for p in selecting if "Egress" in p["spec"].get("policyTypes", [])]
    if not egress:
        fail(f"{where}: no NetworkPolicy limits kvgov's egress")
    rules = [(object_name(p), r) for p in egress for r in p["spec"].get("egress", [])]

    def reaches(to_labels, number, protocol="TCP"):
        for _, rule in rules:
            if rule.get("ports") and not any(port_matches(p, None, number, protocol)
                                             for p in rule["ports"]):
                continue
            if not rule.get("to"):
                return True
            for peer in rule["to"]:
                if set(peer) == {"podSelector"} and to_labels is not None and \
                        matches(peer["podSelector"].get("matchLabels", {}), to_labels):
                    return True
        return False

    for protocol in ("UDP", "TCP"):
        if not reaches(None, 53, protocol):
            fail(f"{where}: kvgov's egress policies do not let it reach DNS ({protocol} 53)")
    for number in sorted(ENGINE_PORTS):
        if not reaches(ENGINE_LABEL, number):
            fail(f"{where}: kvgov's egress policies do not let it reach the engines' port "
                 f"{number} (pods labelled {ENGINE_LABEL})")
    redis = find(objects, "StatefulSet", "kvgov-redis")
    if replicas and redis is not None:
        redis_labels = redis["spec"]["template"]["metadata"]["labels"]
        if not reaches(redis_labels, 6379):
            fail(f"{where}: kvgov's egress policies do not let it reach Redis (6379)")
        redis_policies = [p for p in policies if "Ingress" in p["spec"].get("policyTypes", [])
                          and matches(p["spec"]["podSelector"].get("matchLabels", {}),
                                      redis_labels)]
        if not redis_policies:
            fail(f"{where}: no NetworkPolicy limits ingress to Redis")
        for policy in redis_policies:
            for rule in policy["spec"].get("ingress", []):
                for peer in rule.get("from") or [{}]:
                    labels = peer.get("podSelector", {}).get("matchLabels", {})
                    if set(peer) != {"podSelector"} or not matches(labels, kvgov_labels) or \
                            any(matches(labels, t["metadata"]["labels"])
                                for o, t in templates if o is not statefulset):
                        fail(f"{where} {object_name(policy)}: Redis admits "
                             f"{peer_text(peer) or 'everyone'}, not only kvgov's pods")


# ---- the StatefulSet, as replicas and as the single node ---------------------

def mounted_at(mounts, path):
    """(mountPath, volume, readOnly) of the mount `path` lies on, or None."""
    under = [m for m in mounts if path == m[0] or path.startswith(m[0].rstrip("/") + "/")]
    return max(under, key=lambda m: len(m[0]), default=None)


def check_statefulset(where, objects, commands):
    """What both renders share: the StatefulSet kvgov, its headless
    governing Service, its rolling update, and kvgov's data dir on its
    volumeClaimTemplate `data`."""
    statefulset = kvgov_workload(where, objects)
    who = f"{where} StatefulSet/kvgov"
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    service_name = statefulset["spec"].get("serviceName")
    service = find(objects, "Service", service_name) if service_name else None
    if service is None:
        fail(f"{who}: serviceName {service_name!r} names no Service of the render")
    if service["spec"].get("clusterIP") != "None":
        fail(f"{who}: serviceName {service_name}: Service/{service_name} is not headless "
             f"(clusterIP: None), as a StatefulSet's governing Service must be")
    if not matches(service["spec"].get("selector", {}), labels):
        fail(f"{who}: serviceName {service_name}: Service/{service_name} does not select "
             f"the StatefulSet's pods")
    strategy = statefulset["spec"].get("updateStrategy", {})
    if strategy.get("type") != "RollingUpdate":
        fail(f"{who}: updateStrategy {strategy}, want RollingUpdate: one pod at a time, each "
             f"ready (GET /readyz) before the next stops")
    rolling = strategy.get("rollingUpdate") or {}
    if rolling.get("partition", 0) != 0:
        fail(f"{who}: rollingUpdate.partition {rolling['partition']} leaves pods below it on "
             f"the old template")
    if rolling.get("maxUnavailable", 1) not in (1, "1"):
        fail(f"{who}: rollingUpdate.maxUnavailable {rolling['maxUnavailable']}: a rolling "
             f"update must stop one replica at a time")
    templates = claim_templates(statefulset)
    for role in ("serve", "init"):
        data_dir = option(commands[role], "--data-dir")
        if data_dir is None:
            if role == "serve":
                fail(f"{who}: kvgov serve has no --data-dir")
            continue
        mount = mounted_at(commands[role + " mounts"], data_dir)
        volume = mount[1] if mount else {}
        if "volumeClaimTemplate" not in volume or volume["name"] != "data":
            fail(f"{who}: {'kvgov serve' if role == 'serve' else 'the token import'}'s "
                 f"--data-dir {data_dir} is on volume {volume.get('name')} "
                 f"({sorted(k for k in volume if k != 'name')}), not on the volumeClaimTemplate "
                 f"data: a replica's snapshot and journal must outlive its pod")
    claim = templates["data"]["spec"]
    if not set(claim["accessModes"]) & {"ReadWriteOnce", "ReadWriteOncePod"}:
        fail(f"{who}: volumeClaimTemplate data has accessModes {claim['accessModes']}, want "
             f"ReadWriteOnce: one pod on each store")
    size = claim["resources"]["requests"]["storage"]
    print(f"{where}: StatefulSet kvgov (governing Service {service_name} headless, "
          f"RollingUpdate), its data dir on volumeClaimTemplate data ({size}, "
          f"{', '.join(claim['accessModes'])})")


def check_replicas(where, objects, commands):
    statefulset = kvgov_workload(where, objects)
    replicas = statefulset["spec"].get("replicas", 1)
    if replicas < 2:
        fail(f"{where} StatefulSet/kvgov: {replicas} replica(s), want 2 or more")
    serve, init = commands["serve"], commands["init"]
    url = option(serve, "--redis")
    if url is None or option(init, "--redis") != url:
        fail(f"{where}: kvgov serve --redis {url} and the token import's "
             f"--redis {option(init, '--redis')} must name the same Redis")
    match = re.fullmatch(r"redis://([a-z0-9.-]+):(\d+)/(\d+)", url)
    if match is None:
        fail(f"{where}: --redis {url} is not redis://HOST:PORT/DB (the password goes in "
             f"--redis-password-file)")
    host, port = match.group(1), int(match.group(2))
    # The password: the same file for both, from the Secret kvgov-redis.
    password_file = option(serve, "--redis-password-file")
    if password_file is None or option(init, "--redis-password-file") != password_file:
        fail(f"{where}: kvgov serve --redis-password-file {password_file} and the token "
             f"import's --redis-password-file {option(init, '--redis-password-file')} must "
             f"name the same file")
    passwords = {}
    for role in ("serve", "init"):
        mount_path, volume, _ = mounted_at(commands[role + " mounts"], password_file)
        secret = volume.get("secret", {}).get("secretName", "")
        if GENERATED.sub(r"\1", secret) != "kvgov-redis":
            fail(f"{where} StatefulSet/kvgov {role}: --redis-password-file {password_file} is "
                 f"on volume {volume['name']}, not on the Secret kvgov-redis")
        key = os.path.relpath(password_file, mount_path)
        data = volume_data(objects, volume)
        if key not in data:
            fail(f"{where} StatefulSet/kvgov {role}: --redis-password-file {password_file}: "
                 f"Secret {secret} has no key {key}")
        passwords[role] = data[key].decode()
    password = passwords["serve"]
    service = find(objects, "Service", host.split(".")[0])
    if service is None or not any(p["port"] == port for p in service["spec"]["ports"]):
        fail(f"{where}: --redis names {host}:{port}, which no Service of the render serves")
    redis = find(objects, "StatefulSet", "kvgov-redis")
    if redis is None or not matches(service["spec"]["selector"],
                                    redis["spec"]["template"]["metadata"]["labels"]):
        fail(f"{where}: Service {host} does not select the StatefulSet kvgov-redis")
    container = redis["spec"]["template"]["spec"]["containers"][0]
    args = container.get("args", [])
    values = env_values(objects, container, "kvgov-redis-0")
    expanded = [expand(a, values, f"{where} StatefulSet/kvgov-redis") for a in args]
    if option(expanded, "--appendonly") != "yes":
        fail(f"{where} StatefulSet/kvgov-redis: no --appendonly yes: {args}")
    # kvgov strips the file's trailing whitespace; Redis takes the Secret's
    # bytes as they are.
    if option(expanded, "--requirepass") != password or password != password.rstrip():
        fail(f"{where} StatefulSet/kvgov-redis: --requirepass is not the password kvgov "
             f"reads from {password_file} (with trailing whitespace stripped)")
    claims = set(claim_templates(redis))
    if not any(m["name"] in claims and m["mountPath"] == "/data"
               for m in container.get("volumeMounts", [])):
        fail(f"{where} StatefulSet/kvgov-redis: /data is on no volumeClaimTemplate")
    if option(serve, "--replica-id") != "kvgov-0":
        fail(f"{where}: --replica-id must be the pod's name ($(POD_NAME) from metadata.name), "
             f"the StatefulSet's stable kvgov-N")
    print(f"{where}: {replicas} replicas on Redis {host}:{port} (AOF, the password from "
          f"{password_file}), replica id from the pod's name")


def check_single(where, objects, commands):
    for obj in objects:
        text = yaml.safe_dump(obj)
        if "redis" in obj["metadata"]["name"] or \
                (obj["kind"] == "StatefulSet" and obj["metadata"]["name"] != "kvgov"):
            fail(f"{where}: {object_name(obj)} is left over from the replicas' Redis")
        for word in ("--redis", "REDIS_PASSWORD", "kvgov-redis", "/etc/kvgov/redis"):
            if word in text:
                fail(f"{where}: {object_name(obj)} still speaks of Redis ({word})")
    statefulset = kvgov_workload(where, objects)
    if statefulset["spec"].get("replicas") != 1:
        fail(f"{where} StatefulSet/kvgov: replicas {statefulset['spec'].get('replicas')}, "
             f"want 1")
    serve, init = commands["serve"], commands["init"]
    for flag in ("--redis", "--redis-password-file", "--replica-id"):
        if flag in serve or flag in init:
            fail(f"{where}: a single node takes no {flag}")
    if option(init, "--data-dir") != option(serve, "--data-dir"):
        fail(f"{where}: the token import's --data-dir {option(init, '--data-dir')} is not "
             f"kvgov's {option(serve, '--data-dir')}")
    print(f"{where}: one pod (a StatefulSet stops it before starting its successor), its "
          f"store on its volumeClaimTemplate, no Redis")


# ---- the rendered command lines, run ------------------------------------------

class Served:
    """`kvgov serve` with exactly the given arguments and a ready file, as
    the pod runs it: beyond loopback (0.0.0.0, on a port the kernel picks),
    where kvgov starts only with a token in force. Stopped by its PID."""

    def __init__(self, binary, rundir, args, what, timeout_s=30):
        ready = os.path.join(rundir, "ready")
        self.log_path = os.path.join(rundir, "kvgov.log")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([binary, *args, "--ready-file", ready],
                                            stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)

        try:
            port = wait_for(what, lambda: read_port_file(ready), timeout_s, process=self.process)
            self.url = f"http://127.0.0.1:{port}"
        except TestFailure as error:
            self.stop()
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                fail(f"{error}; its log:\n{f.read()[-3000:]}")

    def stop(self):
        stop_process(self.process)


def check_running(where, objects, binary, commands, probe_paths, token_secrets, tmp):
    """Runs the StatefulSet's own command lines, their files in place: the
    initContainer's token import (twice: it is idempotent), then kvgov serve
    (two replicas on a real redis-server with the render's password, or the
    single node on the data dir the import filled), and asks each the probe
    paths without a token while the imported tokens are in force; then
    stops the first and starts it again on its data dir under its name, as
    the StatefulSet restarts a pod on its volume, and asks it again."""
    serve, init = commands["serve here"], commands["init here"]
    redis = None
    url = option(serve, "--redis")
    if url is not None:
        if shutil.which("redis-server") is None:
            print(f"{where}: SKIP (partly): redis-server is not installed; the replicas' "
                  f"command lines were checked, not run")
            return
        statefulset = find(objects, "StatefulSet", "kvgov-redis")
        container = statefulset["spec"]["template"]["spec"]["containers"][0]
        redis_args = [expand(a, env_values(objects, container, "kvgov-redis-0"), where)
                      for a in container["args"]]
        # Redis with the password of its own container's args; kvgov with
        # the one its --redis-password-file holds: they must agree.
        redis = RedisServer(tmp, password=option(redis_args, "--requirepass"))
        local_url = re.sub(r"^(rediss?://)[^/]+", rf"\g<1>127.0.0.1:{redis.port}", url)
        serve = [local_url if a == url else a for a in serve]
        init = [local_url if a == url else a for a in init]
    replicas = []

    def answers(name, kvgov):
        for path, users in sorted(probe_paths.items()):
            def ok():
                return http("GET", kvgov.url + path)[0] == 200
            try:
                wait_for(f"GET {path}", ok, 10)
            except TestFailure:
                status, body = http("GET", kvgov.url + path)
                fail(f"{name}: GET {path} without a token answers {status} {body[:200]!r}, "
                     f"not 200; it is the path of {sorted(users)}")
        status, _ = http("GET", kvgov.url + "/metrics")
        if status != 401:
            fail(f"{name}: GET /metrics without a token answers {status}: the imported "
                 f"tokens are not in force")
        wait_for(f"{name}: GET /metrics with the imported prometheus token",
                 lambda: http("GET", kvgov.url + "/metrics", headers={
                     "Authorization": f"Bearer {token_secrets['prometheus']}"})[0] == 200,
                 10)

    try:
        for attempt in ("first", "second"):
            out = run([binary, *init], f"{where}: the initContainer's token import ({attempt} "
                      f"run)", timeout_s=30)
            if attempt == "second" and f"0 added, 0 replaced, {len(TOKENS)} unchanged" not in out:
                fail(f"{where}: the token import run again changed something:\n{out}")
        count = 2 if redis is not None else 1
        commands_run = []
        for i in range(count):
            args = list(serve[1:])
            rundir = os.path.join(tmp, f"{where.replace('/', '_')}-kvgov-{i}")
            os.makedirs(rundir)
            if redis is not None:  # each replica its own volume, its own pod name
                args[args.index("--data-dir") + 1] = os.path.join(rundir, "data")
                args[args.index("--replica-id") + 1] = f"kvgov-{i}"
            args = ["serve", *args, "--listen", "0.0.0.0:0", "--gateway-listen", "0.0.0.0:0"]
            commands_run.append(args)
            replicas.append(Served(binary, rundir, args,
                                   f"{where}: kvgov serve with the StatefulSet's arguments"))
        for n, kvgov in enumerate(replicas):
            answers(f"{where} kvgov {n + 1} of {count}", kvgov)
        # The StatefulSet's restart: the same pod name, the same volume.
        replicas[0].stop()
        rundir = os.path.join(tmp, f"{where.replace('/', '_')}-kvgov-0-restarted")
        os.makedirs(rundir)
        replicas[0] = Served(binary, rundir, commands_run[0],
                             f"{where}: kvgov serve restarted on its data dir")
        answers(f"{where} kvgov 1 of {count}, restarted on its data dir under its name",
                replicas[0])
    finally:
        for kvgov in replicas:
            kvgov.stop()
        if redis is not None:
            redis.stop()
    print(f"{where}: the token import ran twice, then {len(replicas)} kvgov serve with the "
          f"StatefulSet's arguments{' on redis-server' if redis else ''} answer "
          f"{sorted(probe_paths)} with 200 without a token, /metrics to the prometheus token; "
          f"the first again after a restart on its data dir")


# ---- main ---------------------------------------------------------------------

def main():
    binary, source_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("SKIP: kubectl (with kustomize) is not installed")
        return SKIP
    if yaml is None:
        print("SKIP: the python3 yaml module is not installed (Debian: python3-yaml)")
        return SKIP
    flags = known_flags(binary)
    with tempfile.TemporaryDirectory(prefix="kvgov-k8s-test-") as tmp:
        k8s = os.path.join(tmp, "k8s")
        source = os.path.join(source_dir, "deploy", "k8s")
        # The source tree's secrets/ may hold real ones: copy only .gitignore.
        with open(os.path.join(source, "base", "secrets", ".gitignore"), encoding="utf-8") as f:
            if f.read().split() != ["*", "!.gitignore"]:
                fail("deploy/k8s/base/secrets/.gitignore must ignore every file but itself: "
                     "the keys, tokens and password made there are never committed")
        shutil.copytree(source, k8s, ignore=lambda d, names: [
            n for n in names
            if os.path.basename(d) == "secrets" and n != ".gitignore"])
        token_secrets = check_make_secrets(binary, k8s)

        targets = ["base"] + sorted(
            os.path.join("overlays", d) for d in os.listdir(os.path.join(k8s, "overlays"))
            if os.path.isfile(os.path.join(k8s, "overlays", d, "kustomization.yaml")))
        if "overlays/single" not in targets:
            fail("deploy/k8s/overlays/single is missing")
        for where in targets:
            objects = render(kubectl, os.path.join(k8s, where))
            probe_paths = {}
            for owner, template in pod_templates(objects):
                who = f"{where} {object_name(owner)}"
                check_security(who, owner, template["spec"])
                check_probes(who, template["spec"], probe_paths)
            check_services(where, objects)
            check_references(where, objects)
            check_config(where, objects, binary, tmp)
            commands = check_kvgov_commands(where, objects, binary, flags, tmp)
            check_statefulset(where, objects, commands)
            replicas = "--redis" in commands["serve"]
            check_network_policies(where, objects, replicas)
            if where == "overlays/single":
                check_single(where, objects, commands)
            elif replicas:
                check_replicas(where, objects, commands)
            else:
                fail(f"{where}: kvgov serve has no --redis, and this is not the single overlay")
            check_running(where, objects, binary, commands, probe_paths, token_secrets, tmp)
            print(f"{where}: {len(objects)} objects checked")
    return 0


if __name__ == "__main__":
    run_main(main)
