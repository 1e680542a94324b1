;;; forj-files.el --- Buffers and git after forj changes files  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; What Emacs does once the worker has changed files of the project:
;; every buffer visiting a changed file is reverted (point kept), and,
;; with `forj-git-auto-stage', the files are staged with `git add',
;; which the worker runs (asynchronously) the way it runs every git of
;; its own.  The paths come from tool
;; results (every shape a writing tool answers with: `path', `files',
;; multi_edit's `details'), from undo and rewind replies, and from
;; recovered batches.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-epc)
(require 'forj-worker)

(defcustom forj-git-auto-stage nil
  "Non-nil: stage the files forj changed (`git add') after they are applied.
Files an undo or rewind deleted are staged as deleted.  Git runs in the
background in the project root; nothing waits for it."
  :type 'boolean
  :group 'forj)

(defconst forj-files--writing-tools
  '("write_file" "file_write" "edit_region" "edit" "multi_edit" "ast_edit")
  "Tools whose results name files they changed.")

(defun forj-files-changed-by-result (result)
  "Return the project paths the tool RESULT (a result plist) changed.
Failed calls and tools that do not write files change none here: the
worker writes a file all or nothing, so a failed edit left it as it was."
  (when (and (eq (plist-get result :ok) t)
             (member (plist-get result :name) forj-files--writing-tools))
    (let* ((body (plist-get result :result))
           (paths nil))
      (when (stringp (plist-get body :path)) (push (plist-get body :path) paths))
      ;; An edit the user modified before approving lists its files.
      (dolist (file (append (plist-get body :files) nil))
        (when (stringp (plist-get file :path)) (push (plist-get file :path) paths)))
      ;; multi_edit: one detail per edit, `changed' when its file was written.
      (dolist (detail (append (plist-get body :details) nil))
        (when (and (stringp (plist-get detail :path)) (eq (plist-get detail :changed) t))
          (push (plist-get detail :path) paths)))
      ;; ast_edit: the files a rename wrote (none for a dry run).
      (when (eq (plist-get body :edited) t)
        (dolist (path (append (plist-get body :files_touched) nil))
          (when (stringp path) (push path paths))))
      (delete-dups (nreverse paths)))))

(defun forj-files-changed-by-results (results)
  "The project paths the tool RESULTS (a list or vector) changed, each once."
  (delete-dups (cl-loop for result in (append results nil)
                        append (forj-files-changed-by-result result))))

(defun forj-files-revert (root paths)
  "Revert every buffer visiting one of PATHS (relative to ROOT), keeping point.
A buffer with unsaved changes is left alone and named in the echo area:
its text is the user's, and the file on disk is forj's now."
  (let ((kept nil))
    (dolist (path paths)
      (let* ((file (forj-project-file path root))
             (buffer (and file (find-buffer-visiting file))))
        (when buffer
          (with-current-buffer buffer
            (cond
             ((buffer-modified-p) (push (buffer-name) kept))
             ((file-exists-p file)
              ;; A buffer the user made read-only stays so.
              (let ((read-only buffer-read-only))
                (revert-buffer t t t)
                (when read-only (setq buffer-read-only t))))
             ;; The change deleted the file: say so rather than leave a
             ;; buffer that looks like a file of the project.
             (t (message "forj: %s was deleted; its buffer is still open" (buffer-name))))))))
    (when kept
      (message "forj: %s changed on disk; not reverted because of your unsaved changes"
               (string-join (nreverse kept) ", ")))))

(defun forj-files-stage (root paths)
  "With `forj-git-auto-stage', stage PATHS of ROOT with `git add -A'.
The worker runs git, as it runs every git of its own: none of the
repository's programs (filters, fsmonitor, hooks) runs.  Return non-nil
when staging was asked for."
  (when (and forj-git-auto-stage paths
             (file-exists-p (expand-file-name ".git" root)))
    (forj-worker-ensure
     root
     (lambda (worker)
       (forj-epc-call (forj-worker-connection worker) "stage" (list :paths (vconcat paths))
                      :success (lambda (reply)
                                 (when (stringp (plist-get reply :error))
                                   (message "forj: git add failed: %s" (plist-get reply :error))))
                      :error (lambda (err)
                               (message "forj: git add failed: %s" (plist-get err :message)))))
     (lambda (err) (message "forj: git add failed: %s" (plist-get err :message))))
    t))

(defun forj-files-applied (root paths)
  "Files PATHS of ROOT were changed by forj: revert their buffers, maybe stage."
  (when (and root paths)
    (forj-files-revert root paths)
    (forj-files-stage root paths)))

(provide 'forj-files)
;;; forj-files.el ends here
