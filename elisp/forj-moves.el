;;; forj-moves.el --- Buffers follow the files forj moves, deletes and patches  -*- lexical-binding: t; -*-

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

;; After a batch, the worker's results say which files moved, which
;; were deleted and which a patch changed.  This file keeps Emacs in
;; step, from `forj-tools-after-batch-functions':
;;
;; - a buffer visiting a moved file (or a file inside a moved
;;   directory) visits it at its new place, unsaved changes and all;
;; - a buffer visiting a deleted file keeps its text and says, in its
;;   header line and in a message, that forj deleted the file and that
;;   undo can bring it back;
;; - an unmodified buffer visiting a file a patch or an overwriting
;;   copy changed is reverted, keeping point.
;;
;; Nothing here writes a file: the worker did the work.

;;; Code:

(require 'cl-lib)
(require 'seq)
(require 'subr-x)
(require 'forj)

;; forj-tools.el loads this file, so it is not required here; the hook
;; below is that file's.
(defvar forj-tools-after-batch-functions)

(defface forj-moves-deleted
  '((t :inherit warning))
  "Face of the header line of a buffer whose file forj deleted."
  :group 'forj)

(defvar-local forj-moves-deleted nil
  "Non-nil in a buffer whose file forj deleted: the file's old name.")

(defun forj-moves--ok (result name)
  "The result plist of RESULT when it is a successful call of tool NAME."
  (and (eq (plist-get result :ok) t)
       (equal (plist-get result :name) name)
       (plist-get result :result)))

(defun forj-moves--under (file directory)
  "Non-nil if FILE lies inside DIRECTORY (both absolute)."
  (string-prefix-p (file-name-as-directory directory) file))

(defun forj-moves--buffers-at (path directory-p)
  "Buffers visiting PATH, or with DIRECTORY-P every file under it."
  (cl-loop for buffer in (buffer-list)
           for file = (buffer-local-value 'buffer-file-name buffer)
           when (and file
                     (if directory-p
                         (forj-moves--under file path)
                       (string= (expand-file-name file) path)))
           collect buffer))

(defun forj-moves-follow-move (root src dst directory-p)
  "Make buffers visiting SRC (relative to ROOT) visit DST instead.
With DIRECTORY-P, SRC and DST are directories and every buffer
visiting a file under SRC follows to the same place under DST."
  (let ((from (forj-project-file src root))
        (to (forj-project-file dst root)))
    (dolist (buffer (and from to (forj-moves--buffers-at from directory-p)))
      (with-current-buffer buffer
        (let ((new (if directory-p
                       (expand-file-name (file-relative-name buffer-file-name from) to)
                     to)))
          ;; The file is already there: no question, no "modified" mark.
          (set-visited-file-name new t t)
          (setq forj-moves-deleted nil))))))

(defun forj-moves-tell-deleted (root path directory-p)
  "Tell each buffer visiting PATH (relative to ROOT) that forj deleted it.
With DIRECTORY-P, PATH is a directory and every buffer under it is told."
  (let ((file (forj-project-file path root))
        (told nil))
    (dolist (buffer (and file (forj-moves--buffers-at file directory-p)))
      (with-current-buffer buffer
        (setq forj-moves-deleted buffer-file-name)
        (setq header-line-format
              (propertize (format (concat " forj deleted %s; this buffer still holds its"
                                          " text (undo in the chat brings the file back)")
                                  (file-relative-name buffer-file-name root))
                          'face 'forj-moves-deleted))
        (push (buffer-name) told)))
    (when told
      (message "forj deleted the file of %s" (string-join (nreverse told) ", ")))))

(defun forj-moves-revert (root path)
  "Revert an unmodified buffer visiting PATH (relative to ROOT), keeping point."
  (let* ((file (forj-project-file path root))
         (buffer (and file (find-buffer-visiting file))))
    (when (and buffer (not (buffer-modified-p buffer))
               (file-exists-p file))
      (with-current-buffer buffer
        (revert-buffer t t t)))))

(defun forj-moves--note (root result name)
  "Bring buffers of ROOT in step with RESULT, the result of tool NAME."
  (pcase name
    ("fs_move"
     (forj-moves-follow-move root (plist-get result :src) (plist-get result :dst)
                             (eq (plist-get result :is_dir) t))
     (when (eq (plist-get result :overwritten) t)
       (forj-moves-revert root (plist-get result :dst))))
    ("fs_delete"
     (when (eq (plist-get result :deleted) t)
       (forj-moves-tell-deleted root (plist-get result :path)
                                (eq (plist-get result :is_dir) t))))
    ("fs_copy"
     (when (eq (plist-get result :overwritten) t)
       (forj-moves-revert root (plist-get result :dst))))
    ("file_patch" (forj-moves-revert root (plist-get result :path)))
    ("apply_patch"
     (when (eq (plist-get result :applied) t)
       (seq-doseq (file (plist-get result :files))
         (let ((path (plist-get file :path)))
           (pcase (plist-get file :action)
             ("moved"
              (forj-moves-follow-move root (plist-get file :from) path nil)
              (forj-moves-revert root path))
             ("deleted" (forj-moves-tell-deleted root path nil))
             (_ (forj-moves-revert root path)))))))))

(defun forj-moves-after-batch (pairs root)
  "Keep buffers in step with the files a batch moved, deleted or patched.
PAIRS is the batch's list of (CALL . RESULT); ROOT the project root."
  (when root
    (dolist (pair pairs)
      (let* ((result (cdr pair))
             (name (plist-get result :name))
             (value (forj-moves--ok result name)))
        (when value
          (forj-moves--note root value name))))))

(add-hook 'forj-tools-after-batch-functions #'forj-moves-after-batch)

(provide 'forj-moves)
;;; forj-moves.el ends here
