// The official E2B JavaScript SDK (npm "e2b", pinned in package-lock.json)
// against an envd node's E2B-compatible API. Run by e2e TestRootE2BTypeScript,
// which sets E2B_API_URL and E2B_SANDBOX_URL to <node>/e2b, E2B_API_KEY to an
// envd token of a tenant whose project "base" (the SDK's default template)
// has /bin/bash and /home/user.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, AuthenticationError, NotFoundError } from 'e2b'

// The SDK's quickstart, unchanged but for the checks.
test('quickstart: create, run a command, write and read a file, list, kill', async () => {
  const sandbox = await Sandbox.create()
  const result = await sandbox.commands.run('echo "Hello from E2B!"')
  assert.equal(result.stdout, 'Hello from E2B!\n')
  assert.equal(result.exitCode, 0)

  await sandbox.files.write('/home/user/hello.txt', 'Hello, world')
  assert.equal(await sandbox.files.read('/home/user/hello.txt'), 'Hello, world')
  const files = await sandbox.files.list('/home/user')
  assert.ok(files.some((f) => f.name === 'hello.txt' && f.type === 'file'), JSON.stringify(files))
  assert.equal((await sandbox.commands.run('cat /home/user/hello.txt')).stdout, 'Hello, world')

  const listed = await Sandbox.list().nextItems()
  const mine = listed.find((s) => s.sandboxId === sandbox.sandboxId)
  assert.ok(mine, 'the sandbox is listed')
  assert.equal(mine.state, 'running')
  assert.equal(mine.templateId, 'base')

  await sandbox.kill()
  const after = await Sandbox.list().nextItems()
  assert.ok(!after.some((s) => s.sandboxId === sandbox.sandboxId), 'a killed sandbox is not listed')
  await assert.rejects(Sandbox.getInfo(sandbox.sandboxId), NotFoundError)
})

test('metadata and setTimeout', async () => {
  const run = `run-${Date.now()}`
  // A timeout long enough for a start on a busy machine: the TTL runs from
  // the create request.
  const sandbox = await Sandbox.create('base', { metadata: { run, owner: 'e2e' }, timeoutMs: 300_000 })
  try {
    const info = await sandbox.getInfo()
    assert.deepEqual(info.metadata, { run, owner: 'e2e' })
    assert.ok(info.endAt.getTime() - Date.now() <= 301_000, `endAt ${info.endAt.toISOString()}`)

    const found = await Sandbox.list({ query: { metadata: { run } } }).nextItems()
    assert.deepEqual(found.map((s) => s.sandboxId), [sandbox.sandboxId])
    const none = await Sandbox.list({ query: { metadata: { run: 'other' } } }).nextItems()
    assert.ok(!none.some((s) => s.sandboxId === sandbox.sandboxId))

    await sandbox.setTimeout(900_000)
    const later = await sandbox.getInfo()
    assert.ok(later.endAt.getTime() - Date.now() > 800_000, `endAt after setTimeout: ${later.endAt.toISOString()}`)
  } finally {
    await sandbox.kill()
  }
})

test('commands: streamed output, non-zero exit, background, stdin, envs', async () => {
  const sandbox = await Sandbox.create('base', { envs: { GREETING: 'hi' } })
  try {
    // Streamed: the first line arrives while the command still runs.
    const chunks = []
    let firstAt
    const start = Date.now()
    const res = await sandbox.commands.run('echo one; sleep 1; echo two >&2; echo three', {
      onStdout: (d) => { firstAt ??= Date.now(); chunks.push(['out', d]) },
      onStderr: (d) => chunks.push(['err', d]),
    })
    const took = Date.now() - start
    assert.equal(res.stdout, 'one\nthree\n')
    assert.equal(res.stderr, 'two\n')
    // stdout and stderr are two pipes: their order holds within each, and
    // 'one' comes a second before the others; 'two' and 'three' may cross.
    assert.equal(chunks.filter(([k]) => k === 'out').map(([, d]) => d).join(''), 'one\nthree\n')
    assert.equal(chunks.filter(([k]) => k === 'err').map(([, d]) => d).join(''), 'two\n')
    assert.equal(chunks[0][1], 'one\n')
    assert.ok(firstAt - start < took - 500, `first output after ${firstAt - start} ms of ${took} ms`)

    // A non-zero exit is CommandExitError with the code and both streams.
    await assert.rejects(sandbox.commands.run('echo out; echo err >&2; exit 3'), (e) => {
      assert.ok(e instanceof CommandExitError, String(e))
      assert.equal(e.exitCode, 3)
      assert.equal(e.stdout, 'out\n')
      assert.equal(e.stderr, 'err\n')
      return true
    })

    // Environment: the sandbox's envs and the command's own.
    assert.equal((await sandbox.commands.run('echo $GREETING $WHO', { envs: { WHO: 'there' } })).stdout, 'hi there\n')

    // Background: listed while it runs, killed by pid.
    let sawStarted
    const started = new Promise((resolve) => { sawStarted = resolve })
    const bg = await sandbox.commands.run('echo started; sleep 60', {
      background: true, onStdout: (d) => { if (d.includes('started')) sawStarted() },
    })
    assert.ok(bg.pid > 0)
    await started
    const procs = await sandbox.commands.list()
    assert.ok(procs.some((p) => p.pid === bg.pid && p.cmd === '/bin/bash'), JSON.stringify(procs))
    assert.equal(await sandbox.commands.kill(bg.pid), true)
    await assert.rejects(bg.wait(), (e) => e instanceof CommandExitError && e.exitCode !== 0 && e.stdout === 'started\n')
    assert.ok(!(await sandbox.commands.list()).some((p) => p.pid === bg.pid))

    // A background command that ends by itself, waited for.
    const done = await sandbox.commands.run('sleep 0.5; echo finished', { background: true })
    assert.equal((await done.wait()).stdout, 'finished\n')

    // Reattach to a running command by pid: its output from then on.
    const reader = await sandbox.commands.run('read line; echo got $line', { background: true, stdin: true })
    const again = await sandbox.commands.connect(reader.pid)
    await sandbox.commands.sendStdin(reader.pid, 'x\n')
    assert.equal((await again.wait()).stdout, 'got x\n')
    assert.equal(await sandbox.commands.kill(reader.pid), false, 'an ended command is not found')

    // Stdin.
    const cat = await sandbox.commands.run('cat', { background: true, stdin: true })
    await sandbox.commands.sendStdin(cat.pid, 'piped\n')
    await sandbox.commands.closeStdin(cat.pid)
    assert.equal((await cat.wait()).stdout, 'piped\n')
  } finally {
    await sandbox.kill()
  }
})

test('files: make dir, rename, exists, watch, remove', async () => {
  const sandbox = await Sandbox.create()
  try {
    assert.equal(await sandbox.files.makeDir('/home/user/dir/sub'), true)
    assert.equal(await sandbox.files.makeDir('/home/user/dir/sub'), false, 'an existing dir')
    await sandbox.files.write('/home/user/dir/a.txt', 'A')
    await sandbox.files.rename('/home/user/dir/a.txt', '/home/user/dir/b.txt')
    assert.equal(await sandbox.files.exists('/home/user/dir/a.txt'), false)
    assert.equal(await sandbox.files.read('/home/user/dir/b.txt'), 'A')
    const entries = await sandbox.files.list('/home/user/dir', { depth: 2 })
    assert.deepEqual(entries.map((e) => e.path).sort(), ['/home/user/dir/b.txt', '/home/user/dir/sub'])

    // A watch reports changes made after watchDir returned.
    let sawCreate
    const created = new Promise((resolve) => { sawCreate = resolve })
    const events = []
    const watch = await sandbox.files.watchDir('/home/user/dir', (e) => {
      events.push(e)
      if (e.name === 'new.txt' && e.type === 'create') sawCreate()
    })
    await sandbox.files.write('/home/user/dir/new.txt', 'N')
    await created
    await watch.stop()
    assert.ok(events.every((e) => !e.name.startsWith('/')), JSON.stringify(events))

    await sandbox.files.remove('/home/user/dir')
    assert.equal(await sandbox.files.exists('/home/user/dir'), false)
    await assert.rejects(sandbox.files.read('/home/user/missing.txt'), NotFoundError)
  } finally {
    await sandbox.kill()
  }
})

test('pause and resume: files kept (hibernate, then start)', async () => {
  const sandbox = await Sandbox.create('base', { lifecycle: { onTimeout: 'pause' } })
  try {
    await sandbox.files.write('/home/user/kept.txt', 'across a pause')
    assert.equal(await sandbox.pause(), true)
    assert.equal((await sandbox.getInfo()).state, 'paused')
    assert.equal(await sandbox.pause(), false, 'already paused')
    const listed = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    assert.ok(listed.some((s) => s.sandboxId === sandbox.sandboxId))

    const resumed = await Sandbox.connect(sandbox.sandboxId)
    assert.equal((await resumed.getInfo()).state, 'running')
    assert.equal(await resumed.files.read('/home/user/kept.txt'), 'across a pause')
    assert.equal((await resumed.commands.run('echo back')).stdout, 'back\n')
  } finally {
    await sandbox.kill()
  }
  // A sandbox made without onTimeout 'pause' is not paused, and says why.
  const plain = await Sandbox.create()
  try {
    await assert.rejects(plain.pause(), /cannot be paused: envd pauses only sandboxes created with onTimeout 'pause'/)
  } finally {
    await plain.kill()
  }
})

test('errors the SDK reports clearly: unknown template, wrong key', async () => {
  await assert.rejects(Sandbox.create('no-such-template'), (e) => {
    assert.match(e.message, /404: template "no-such-template" not found/)
    return true
  })
  await assert.rejects(Sandbox.create({ apiKey: 'not-an-envd-token' }), AuthenticationError)
  await assert.rejects(Sandbox.list({ apiKey: 'not-an-envd-token' }).nextItems(), AuthenticationError)
})
