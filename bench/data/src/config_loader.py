import json
import os


DEFAULTS = {"host": "127.0.0.1", "port": 8080, "debug": False, "workers": 2}


def load_config(path):
    config = dict(DEFAULTS)
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
        for key in data:
            if key not in DEFAULTS:
                raise KeyError(f"unknown setting {key}")
            config[key] = data[key]
    for key in config:
        env_name = "APP_" + key.upper()
        if env_name in os.environ:
            value = os.environ[env_name]
            if isinstance(DEFAULTS[key], bool):
                value = value.lower() in ("1", "true", "yes")
            elif isinstance(DEFAULTS[key], int):
                value = int(value)
            config[key] = value
    return config


def validate(config):
    if not 0 < config["port"] < 65536:
        raise ValueError("port out of range")
    if config["workers"] < 1:
        raise ValueError("need at least one worker")
    return True
