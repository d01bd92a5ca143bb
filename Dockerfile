# duplex-gateway, CPU image: the voice agent on embedded defaults.
#
#   docker build -t duplex-gateway .
#   docker run -p 8000:8000 duplex-gateway            # embedded Valkey under /data
#
# The image installs exactly what `./run serve` installs on a fresh machine (the
# same script does it), so the two never drift apart.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends libsndfile1 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY . /app
ENV DUPLEX_VENV=/opt/venv DUPLEX_EXTRAS=cpu,tts PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
# `./run` sets up the venv on first use; --help makes it stop right after
RUN ./run serve --help > /dev/null

VOLUME /data
EXPOSE 8000
# the models warm up once per container start; /readyz says when
CMD ["duplex-gateway", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
