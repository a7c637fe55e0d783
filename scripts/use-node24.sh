# Source this file (". scripts/use-node24.sh") to get a Node.js >= 22 on PATH.
# Toolport targets Node 24 LTS. Where the machine's node is older, the `node`
# package of the npm registry (a real Node 24 binary) is installed once into
# a cache directory and put first on PATH. A machine that already has
# Node >= 22 is left alone.
toolport_node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if [ "$(toolport_node_major)" -lt 22 ]; then
  TOOLPORT_NODE_DIR="${TOOLPORT_NODE_DIR:-$HOME/.cache/toolport-node24}"
  if [ ! -x "$TOOLPORT_NODE_DIR/node_modules/.bin/node" ]; then
    mkdir -p "$TOOLPORT_NODE_DIR"
    npm install --prefix "$TOOLPORT_NODE_DIR" --no-save --no-audit --no-fund --loglevel=error node@24 >&2
  fi
  PATH="$TOOLPORT_NODE_DIR/node_modules/.bin:$PATH"
  export PATH
fi
echo "using node $(node --version) from $(command -v node)" >&2
