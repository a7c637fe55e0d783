# Source this file (". scripts/use-node24.sh") to get a Node.js >= 22.19 on PATH
# (src/node-version.ts says why that one).
# Toolport targets Node 24 LTS. Where the machine's node is older, the `node`
# package of the npm registry (a real Node 24 binary) is installed once into
# a cache directory and put first on PATH. A machine that already has
# Node >= 22.19 is left alone.
toolport_node_ok() { node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 22 || (a === 22 && b >= 19) ? 0 : 1)' 2>/dev/null; }
if ! toolport_node_ok; then
  TOOLPORT_NODE_DIR="${TOOLPORT_NODE_DIR:-$HOME/.cache/toolport-node24}"
  if [ ! -x "$TOOLPORT_NODE_DIR/node_modules/.bin/node" ]; then
    mkdir -p "$TOOLPORT_NODE_DIR"
    npm install --prefix "$TOOLPORT_NODE_DIR" --no-save --no-audit --no-fund --loglevel=error node@24 >&2
  fi
  PATH="$TOOLPORT_NODE_DIR/node_modules/.bin:$PATH"
  export PATH
fi
echo "using node $(node --version) from $(command -v node)" >&2
