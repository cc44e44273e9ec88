#!/usr/bin/env bash
# The main job of `make run`: generate text with the default model.
# Model: $LARES_MODEL when set, else ../shared/models/stories260K.gguf when
# present, else a small public TinyStories GGUF downloaded into models/.
set -euo pipefail
LARES=${1:-build/lares}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ -n "${LARES_MODEL:-}" ]; then
  model=$LARES_MODEL
  echo "lares: using \$LARES_MODEL = $model" >&2
elif [ -f "$here/../shared/models/stories260K.gguf" ]; then
  model="$here/../shared/models/stories260K.gguf"
  echo "lares: using the shared test model $model" >&2
else
  model="$here/models/stories260K.gguf"
  if [ ! -f "$model" ]; then
    mkdir -p "$here/models"
    echo "lares: no local model: downloading a small public TinyStories GGUF (about 1 MB) to $model" >&2
    ok=0
    for url in \
      https://huggingface.co/ggml-org/models-moved/resolve/main/tinyllamas/stories260K.gguf \
      https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf; do
      echo "lares: trying $url" >&2
      if curl -fL --retry 2 --connect-timeout 15 --progress-bar -o "$model.part" "$url"; then
        mv "$model.part" "$model"
        ok=1
        break
      fi
    done
    if [ $ok -ne 1 ]; then
      rm -f "$model.part"
      echo "lares: could not download a model (offline?). Set LARES_MODEL=/path/to/model.gguf and run again." >&2
      exit 1
    fi
  else
    echo "lares: using the downloaded model $model" >&2
  fi
fi

prompt=${LARES_PROMPT:-"Once upon a time"}
echo "lares: generating 128 tokens from \"$prompt\"" >&2
exec "$LARES" run -m "$model" -p "$prompt" -n 128 --temp 0.8 --seed 42
