import { type FSWatcher, watch as fsWatch, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

/**
 * Watches every directory under `root`, each with a non-recursive watcher, and reports the path of
 * each entry that changed. Node 20's recursive `fs.watch` on Linux watches files by inode, so a
 * file replaced by rename (`sed -i`, vim, an editor's safe-write) is lost after its first
 * replacement; a directory's watcher sees every later write and rename of its entries. A directory
 * created later is watched from its first event. Returns a function that stops watching.
 */
export function watchTree(root: string, skip: (relPath: string) => boolean, onChange: (path: string) => void): () => void {
  const watchers = new Map<string, FSWatcher>();
  const isDir = (path: string) => statSync(path, { throwIfNoEntry: false })?.isDirectory() === true;
  const add = (dir: string) => {
    if (watchers.has(dir) || (dir !== root && skip(relative(root, dir)))) return;
    let watcher: FSWatcher;
    try {
      watcher = fsWatch(dir, (_event, name) => {
        if (name === null) return;
        const full = join(dir, name.toString());
        if (isDir(full)) add(full);
        onChange(full);
      });
    } catch {
      return; // gone already
    }
    watcher.on('error', () => drop(dir));
    watchers.set(dir, watcher);
    try {
      for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) add(join(dir, e.name));
    } catch {
      drop(dir); // removed while being added
    }
  };
  const drop = (dir: string) => {
    watchers.get(dir)?.close();
    watchers.delete(dir);
  };
  add(root);
  return () => {
    for (const dir of [...watchers.keys()]) drop(dir);
  };
}
