"""Small trainable models on sklearn's 8x8 digits: an MLP and a CNN (conv, BatchNorm in training mode, ReLU, max-pool).

Both train with Adam on fixed mini-batches (a seeded permutation of the data set), so the losses are reproducible and
a torch run from the same initial weights (tests/test_models.py) gives the same numbers.
"""
from __future__ import annotations
from dataclasses import dataclass, field
import numpy as np
from tinysched import Tensor, nn
from tinysched.dtype import dtypes
from tinysched.nn.state import get_state_dict
from tinysched.models.layers import realize
from tinysched.models.assets import digits

def digits_split(seed: int = 0, n_test: int = 297) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(x_train (N, 8, 8) in [0, 1], y_train, x_test, y_test): a seeded shuffle of load_digits, the last n_test held out."""
  x, y = digits()
  perm = np.random.default_rng(seed).permutation(len(x))
  x, y = x[perm] / 16.0, y[perm]
  return x[:-n_test].astype(np.float32), y[:-n_test].astype(np.int32), x[-n_test:].astype(np.float32), y[-n_test:].astype(np.int32)

def batches(n: int, batch: int, steps: int) -> list[np.ndarray]:
  """Index arrays of `steps` consecutive mini-batches, wrapping around the training set."""
  return [np.arange(i * batch, (i + 1) * batch) % n for i in range(steps)]

class MLP:
  def __init__(self, sizes: tuple[int, ...] = (64, 64, 10)):
    self.layers = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
  def __call__(self, x: Tensor) -> Tensor:
    for i, lin in enumerate(self.layers):
      x = lin(x)
      if i < len(self.layers) - 1: x = x.relu()
    return x

class CNN:
  """conv3x3(1->8) BN ReLU maxpool2 -> conv3x3(8->16) BN ReLU maxpool2 -> linear(64->10), for (N, 1, 8, 8) inputs.

  The convolutions have no bias: BatchNorm right after cancels it (and Adam would amplify its ~0 gradient into noise)."""
  def __init__(self):
    self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
    self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
    self.fc = nn.Linear(64, 10)
  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn1(self.conv1(x)).relu().max_pool2d(2)
    x = self.bn2(self.conv2(x)).relu().max_pool2d(2)
    return self.fc(x.flatten(1))

@dataclass
class TrainResult:
  losses: list[float]
  init: dict[str, np.ndarray]              # trainable weights before the first step (for a reference run)
  final: dict[str, np.ndarray]             # every state tensor after the last step (weights and BN statistics)
  test_accuracy: float | None = None
  extra: dict = field(default_factory=dict)

def _trainable(model) -> dict[str, Tensor]:
  return {k: v for k, v in get_state_dict(model).items() if "running" not in k and "num_batches" not in k}

def train(model, x: np.ndarray, y: np.ndarray, steps: int, batch: int, lr: float, x_test: np.ndarray | None = None,
          y_test: np.ndarray | None = None) -> TrainResult:
  """Adam on cross entropy over fixed mini-batches; each step (forward, backward, update) is one realize."""
  params = _trainable(model)
  for p in params.values(): p.realize()
  init = {k: v.numpy().copy() for k, v in params.items()}
  opt = nn.optim.Adam(list(params.values()), lr=lr)
  # BatchNorm's running statistics are updated by lazy assigns: realize them with each step, not at the end
  stats = [v for k, v in get_state_dict(model).items() if k not in params]
  losses = []
  with Tensor.train():
    for idx in batches(len(x), batch, steps):
      opt.zero_grad()
      loss = model(Tensor(x[idx])).sparse_categorical_crossentropy(Tensor(y[idx], dtype=dtypes.int32))
      loss.backward()
      realize(loss, *opt.schedule_step(), *stats, label="train_step")
      losses.append(float(loss.item()))
  acc = None
  if x_test is not None and y_test is not None:
    pred = model(Tensor(x_test)).numpy().argmax(-1)  # host argmax: the eval forward is the workload, not the argmax
    acc = float((pred == y_test).mean())
  return TrainResult(losses, init, {k: v.numpy().copy() for k, v in get_state_dict(model).items()}, acc)

def train_mlp(steps: int = 5, batch: int = 64, lr: float = 1e-2, seed: int = 0, evaluate: bool = False) -> TrainResult:
  x, y, xt, yt = digits_split(seed)
  Tensor.manual_seed(seed)
  model = MLP()
  return train(model, x.reshape(-1, 64), y, steps, batch, lr, xt.reshape(-1, 64) if evaluate else None, yt if evaluate else None)

def train_cnn(steps: int = 5, batch: int = 32, lr: float = 1e-2, seed: int = 0, evaluate: bool = False) -> TrainResult:
  x, y, xt, yt = digits_split(seed)
  Tensor.manual_seed(seed)
  model = CNN()
  # evaluation runs BatchNorm on its running statistics (Tensor.training is off outside train())
  return train(model, x[:, None], y, steps, batch, lr, xt[:, None] if evaluate else None, yt if evaluate else None)

__all__ = ["MLP", "CNN", "train", "train_mlp", "train_cnn", "digits_split", "batches", "TrainResult"]
