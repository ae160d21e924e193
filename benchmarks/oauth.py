"""Cost of checking one OAuth access token per request, keys cached (target: 0.1 ms or less).

    .venv/bin/python benchmarks/oauth.py [--requests 5000] [--rounds 5]

`ResourceServer.authenticate` runs on every HTTP request when `toolscore.http.auth` is set. A
token seen for the first time is checked in full (size, header, the cached key, signature, claims);
a client then sends the same token on every request until it expires, and those repeats are
answered from the verified-token cache (a digest, the expiry, whether the key set is the same).
Both are measured per algorithm, against PyJWT's own `jwt.decode` with the same key (the floor of
a full check) and the token file's constant-time compare. The median of the rounds' per-request
medians is printed, in microseconds of wall time (`--cpu`: CPU time) on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from toolscore.config import HttpAuth
from toolscore.front.http import parse_token_file
from toolscore.front.oauth import KeySource, ResourceServer

ISSUER = "https://issuer.example.com/realms/team"
AUDIENCE = "https://gateway.example.com/mcp"
KEYS: dict[str, Any] = {
    "RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "ES256": ec.generate_private_key(ec.SECP256R1()),
    "EdDSA": ed25519.Ed25519PrivateKey.generate(),
}


def _setup(folder: Path, requests: int) -> tuple[ResourceServer, dict[str, list[str]]]:
    jwks = [
        {**json.loads(jwt.get_algorithm_by_name(alg).to_jwk(key.public_key())), "kid": alg, "alg": alg, "use": "sig"}
        for alg, key in KEYS.items()
    ]
    path = folder / "jwks.json"
    path.write_text(json.dumps({"keys": jwks}))
    settings = HttpAuth(issuer=ISSUER, audience=AUDIENCE, jwks=str(path), scopes=("mcp:tools",))
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "5b4c0e0f-1c9e-4a3b-8f7e-0d7c2a1b9e3f",
        "iat": int(time.time()),
        "exp": int(time.time()) + 3600,
        "scope": "openid profile mcp:tools",
        "roles": ["analyst", "ops"],
    }
    tokens = {
        alg: [jwt.encode({**claims, "jti": str(n)}, key, algorithm=alg, headers={"kid": alg}) for n in range(requests)]
        for alg, key in KEYS.items()
    }
    return ResourceServer(settings, KeySource(str(path))), tokens


CLOCK = [time.perf_counter]
"""What a request's cost is read from: wall time, or with `--cpu` this thread's CPU time (which a
machine busy with other work inflates less)."""


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


async def _round(settings: HttpAuth, jwks: str, tokens: dict[str, list[str]]) -> dict[str, float]:
    server = ResourceServer(settings, KeySource(jwks))  # nothing remembered from the last round
    out: dict[str, float] = {}
    requests = len(next(iter(tokens.values())))
    for alg, each in tokens.items():
        public = KEYS[alg].public_key()
        first: list[float] = []
        repeat: list[float] = []
        floor: list[float] = []
        for token in each:
            header = f"Bearer {token}"
            start = CLOCK[0]()
            await server.authenticate(header)
            first.append(CLOCK[0]() - start)
            start = CLOCK[0]()
            await server.authenticate(header)
            repeat.append(CLOCK[0]() - start)
            start = CLOCK[0]()
            jwt.decode(token, public, algorithms=[alg], audience=AUDIENCE, issuer=ISSUER)
            floor.append(CLOCK[0]() - start)
        out[f"{alg} first sight"] = _median_us(first)
        out[f"{alg} repeat (cached)"] = _median_us(repeat)
        out[f"{alg} jwt.decode alone"] = _median_us(floor)
    file_tokens = parse_token_file("alice alice-0123456789abcdefghij\nbob bob-9876543210zyxwvutsrqpo\n", "bench")
    compare: list[float] = []
    for _ in range(requests):
        start = CLOCK[0]()
        file_tokens.principal(b"bob-9876543210zyxwvutsrqpo")
        compare.append(CLOCK[0]() - start)
    out["token file compare"] = _median_us(compare)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu", action="store_true", help="this thread's CPU time instead of wall time")
    args = parser.parse_args()
    if args.cpu:
        CLOCK[0] = time.thread_time
    with tempfile.TemporaryDirectory() as folder:
        server, tokens = _setup(Path(folder), args.requests)
        assert all(not hasattr(anyio.run(server.authenticate, f"Bearer {t[0]}"), "error") for t in tokens.values())
        rounds = [anyio.run(_round, server.settings, server.settings.jwks, tokens) for _ in range(args.rounds)]
    clock = "CPU" if args.cpu else "wall"
    print(f"per request, median of {args.rounds} rounds x {args.requests} tokens (microseconds of {clock} time):")
    for name in rounds[0]:
        print(f"  {name:<26} {statistics.median(r[name] for r in rounds):8.1f}")


if __name__ == "__main__":
    main()
